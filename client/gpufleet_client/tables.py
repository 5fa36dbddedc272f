"""Plain-text output for people: aligned columns, and `name  value` blocks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns as wide as their widest cell, two spaces apart; no trailing blanks."""
    cells = [list(headers), *([cell_text(cell) for cell in row] for row in rows)]
    widths = [max(len(row[column]) for row in cells) for column in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def fields(pairs: Iterable[tuple[str, Any]]) -> str:
    pairs = [(name, cell_text(value)) for name, value in pairs]
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(f"{name.ljust(width)}  {value}".rstrip() for name, value in pairs)


def cell_text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(map(cell_text, value)) or "-"
    return str(value)


def when(text: str | None) -> str:
    """A time of the API (ISO 8601) in UTC to the second, as `2026-11-29 17:00:05Z`."""
    if not text:
        return "-"
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return str(text)
    if moment.tzinfo is None:
        return moment.isoformat(" ", "seconds")
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def timestamp(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{seconds:g} (epoch seconds)"
