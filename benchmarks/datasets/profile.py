"""What a loaded dataset holds, as `memforest-bench data` prints it before a long run: sizes, what the
loader changed in the source (and an errata file, when one is applied), the types of the gold answers,
the largest session and turn, and every entry that could not be loaded, with why."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .records import Dataset


def describe(dataset: Dataset) -> str:
    counts = dataset.counts
    sessions = [(instance.instance_id, s) for instance in dataset.instances for s in instance.sessions]
    turns = [(iid, t) for iid, s in sessions for t in s.turns]
    answers = Counter(question.answer_type for _, question in dataset.questions())
    categories = Counter(question.category for _, question in dataset.questions())
    lines = [
        f"dataset {dataset.name} ({dataset.kind}): {dataset.source}",
        f"sha256: {dataset.sha256}",
        f"instances: {len(dataset.instances)}",
        f"questions: {dataset.num_questions} ({_counted(sorted(categories.items()))})",
        f"sessions: {len(sessions)}",
        f"turns: {len(turns)}",
        f"unreadable turns dropped: {counts.unreadable_turns_dropped} "
        f"(in {counts.instances_with_unreadable_turns} instances)",
        f"sessions left without a readable turn, dropped: {counts.empty_sessions_dropped}",
        f"duplicate sessions dropped (same id, date and turns): {counts.duplicate_sessions_dropped}",
        f"repeated sessions kept under derived ids (same id, other date or turns): {counts.sessions_renamed}",
        f"answer types: {_counted(answers.most_common())}",
    ]
    if dataset.errata is not None:
        lines.append(f"errata applied: {dataset.errata.file} (version {dataset.errata.version}): "
                     f"{counts.errata_answers_changed} answers changed, {counts.errata_evidence_changed} "
                     f"evidence changed, {counts.errata_questions_dropped} questions dropped, "
                     f"{len(dataset.errata.not_loaded)} entries for questions not loaded")
    if sessions:
        iid, longest = max(sessions, key=lambda pair: len(pair[1].turns))
        lines.append(f"longest session: {len(longest.turns)} turns ({iid}, session {longest.session_id})")
    if turns:
        iid, turn = max(turns, key=lambda pair: len(pair[1].content))
        lines.append(f"longest turn: {len(turn.content)} characters ({iid}, turn {turn.turn_id})")
    lines.append(f"entries that would fail: {len(dataset.failures)}")
    lines += [f"- {f.instance_id}: {f.stage}: {f.reason}" for f in dataset.failures]
    return "\n".join(lines) + "\n"


def _counted(pairs: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{name} {n}" for name, n in pairs)
