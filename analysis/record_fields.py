"""How the typed records of `analysis.records` read and write a row, on the standard library only:
the row's layout version, the fields a record names (typed sub-records among them), and the rest of
the row kept in `extra` and written back; and `pick`, a typed view of any plain mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, TypeVar

LAYOUT = 2  # the layout the records write
PREVIOUS_LAYOUT = 1  # rows without a version field

T = TypeVar("T", bound="Fields")
Row = Mapping[str, Any]


class LayoutError(ValueError):
    """A row written in a layout these records do not know (a newer harness wrote it)."""


def layout_of(row: Row) -> int:
    """The layout version of a row: its `version` field, 1 without one."""
    version = int(row.get("version", PREVIOUS_LAYOUT))
    if version > LAYOUT or version < PREVIOUS_LAYOUT:
        raise LayoutError(f"row of layout {version}; this reader knows layouts {PREVIOUS_LAYOUT}..{LAYOUT}")
    return version


def plain(value: Any) -> Any:
    """A value as JSON holds it: records as rows, tuples as lists."""
    if isinstance(value, Fields):
        return value.to_row()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


class Fields:
    """Reading and writing of a dataclass's fields by name; the rest of a row goes to `extra`.

    `_NESTED` names the fields that hold a typed sub-record; `_ALWAYS` the fields written even when
    None (the writers always write them); `_VERSIONED` whether rows carry the layout version."""

    _NESTED: ClassVar[Mapping[str, type[Fields]]] = {}
    _ALWAYS: ClassVar[frozenset[str]] = frozenset()
    _VERSIONED: ClassVar[bool] = False

    @classmethod
    def _names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name not in ("version", "extra")]  # type: ignore[arg-type]

    @classmethod
    def from_row(cls: type[T], row: Row) -> T:
        names = cls._names()
        values: dict[str, Any] = {}
        for name in names:
            if name not in row:
                continue
            value, nested = row[name], cls._NESTED.get(name)
            typed = nested is not None and isinstance(value, Mapping)
            values[name] = nested.from_row(value) if typed and nested is not None else value
        known = {*names, "version"}
        values["extra"] = {key: value for key, value in row.items() if key not in known}
        if cls._VERSIONED:
            values["version"] = layout_of(row)
        return cls(**values)

    def to_row(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": LAYOUT} if self._VERSIONED else {}
        for name in self._names():
            value = getattr(self, name)
            if value is not None or name in self._ALWAYS:
                out[name] = plain(value)
        extra: Mapping[str, Any] = getattr(self, "extra", {})
        return {**out, **{k: v for k, v in extra.items() if k not in out}}


D = TypeVar("D")


def pick(cls: type[D], row: Row) -> D:
    """A dataclass of the keys of `row` that name its fields (the rest ignored): a typed view of a
    plain mapping, such as a summary block or a stored configuration node."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{key: value for key, value in row.items() if key in names})
