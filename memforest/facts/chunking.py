"""Cutting a session into cells of at most b consecutive turns."""

from __future__ import annotations

from memforest.config import ChunkConfig
from memforest.types import Cell, Session, Turn


def render_turns(turns: list[Turn]) -> str:
    return "\n".join(f"{t.role}: {' '.join(t.content.split())}" for t in turns)


def chunk_session(session: Session, cfg: ChunkConfig) -> list[Cell]:
    """Cells of at most `max_turns` turns (0: no turn limit, the whole session) and `max_chars`
    characters; a new cell starts after a gap of `gap_hours` between consecutive turns. A single
    over-long turn is cut to `max_chars`. Blank turns (nothing readable) are in no cell and count for
    nothing; a cell's `turn_lo` and `turn_hi` are its first and last turns' indices in the session,
    so the turns keep the numbers they were given."""
    cells: list[Cell] = []
    positions = [i for i, t in enumerate(session.turns) if t.content]
    turns = [session.turns[i] for i in positions]
    start = 0
    max_turns = cfg.max_turns or len(turns)
    gap = cfg.gap_hours * 3600.0
    while start < len(turns):
        end = start + 1
        size = len(turns[start].content)
        while (
            end < len(turns)
            and end - start < max_turns
            and size + len(turns[end].content) <= cfg.max_chars
            and turns[end].time - turns[end - 1].time < gap
        ):
            size += len(turns[end].content)
            end += 1
        text = render_turns(turns[start:end])[: cfg.max_chars]
        idx = len(cells)
        cells.append(Cell(f"{session.session_id}#{idx}", session.session_id, idx, positions[start],
                          positions[end - 1], turns[start].time, text))
        start = end
    return cells
