"""A statement or a lock wait that outran its timeout (GPUFLEET_DB_STATEMENT_TIMEOUT_MS,
GPUFLEET_DB_LOCK_TIMEOUT_MS): the database was busy, the request was not wrong. The API's
exception handler (core.api) and the pages' middleware (gpufleet.middleware) both answer it
503 `{"detail": ...}` with Retry-After, never a 500."""

from __future__ import annotations

from django.db import OperationalError
from psycopg import errors

DETAIL = "the database is busy: try again shortly"
# Long enough for the transaction that held the lock to have ended, short enough that a client's
# retry is no real wait.
RETRY_AFTER_SECONDS = 5


def gave_up_waiting(error: BaseException) -> bool:
    """Whether `error` is PostgreSQL giving up on a lock wait (lock_timeout) or on a statement
    (statement_timeout, or a cancel), as Django passes it on: an OperationalError caused by it."""
    return isinstance(error, OperationalError) and isinstance(
        error.__cause__, (errors.LockNotAvailable, errors.QueryCanceled)
    )
