"""The soak suite runs end to end on a few sessions: a reader process and a writer process, samples
over time and a verdict per measure."""

from __future__ import annotations

from benchmarks.micro import __main__ as bench
from benchmarks.micro import soak


def test_soak_suite_samples_and_judges() -> None:
    assert bench.SUITES["soak"] is soak.main
    out = soak.main(["--sessions", "12", "--sample-s", "0.2"])
    assert out["sessions"] == 12 and out["samples"]
    end = out["samples"][-1]
    assert end["queries"] == 40 and end["fds"] > 0 and end["rss_mib"] > 0
    assert set(out["bounded"]) == {"resident_memory", "log_size", "open_files", "query_p95"}
    assert out["fresh"]["p95_ms"] >= out["fresh"]["p50_ms"] > 0


def test_verdicts_follow_their_rules() -> None:
    flat = [{"rss_mib": 100.0, "log_mib": 4.0, "fds": 10, "p95_ms": 5.0}] * 4
    assert all(soak.verdicts(flat, {"rss_mib": 100.0, "p95_ms": 5.0}).values())
    growing = [{**s, "log_mib": 4.0 * 10 ** i, "fds": 10 + 5 * i} for i, s in enumerate(flat)]
    found = soak.verdicts(growing, {"rss_mib": 10.0, "p95_ms": 1.0})
    assert found == {"resident_memory": False, "log_size": False, "open_files": False, "query_p95": False}
