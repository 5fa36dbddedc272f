"""How old a row of a growing table must be before the retention sweep (workflows/retention.py)
deletes it. Pure: the standard library only.

A table keeps its rows for the days its GPUFLEET_RETAIN_*_DAYS setting gives, and never less than
what the control plane still reads back from it: the repeat-offender window over remediations, the
blast-radius cap's window, idle diagnostics' retry wait, a login lockout's cool-off. A setting set
shorter than such a window cannot make the control plane forget what it is still counting.
"""

from __future__ import annotations

from datetime import datetime, timedelta

BATCH_SIZE = 1000  # rows deleted per transaction: each holds its locks for a moment only


def cutoff(now: datetime, *, days: float, keep_at_least: timedelta = timedelta(0)) -> datetime:
    """Rows older than this may go: `days` before `now`, or `keep_at_least` before it when that
    reaches further back."""
    return now - max(timedelta(days=days), keep_at_least)
