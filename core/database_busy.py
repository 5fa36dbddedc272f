"""The database busy or out of reach: the request was not wrong. The API's exception handler
(core.api) and the pages' middleware (gpufleet.middleware) both answer it 503 `{"detail": ...}`
with Retry-After, never a 500.

Busy: a statement or a lock wait outran its timeout (GPUFLEET_DB_STATEMENT_TIMEOUT_MS,
GPUFLEET_DB_LOCK_TIMEOUT_MS). Unavailable: no connection could be made (no server answered within
DATABASE_CONNECT_TIMEOUT, or only a standby did, which target_session_attrs=read-write passes over),
or the one in use broke (its server shut down or died): a failover under way, or the server down.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import InterfaceError, OperationalError, connection
from psycopg import errors


@dataclass(frozen=True)
class Refusal:
    detail: str
    retry_after_seconds: int


# Long enough for the transaction that held the lock to have ended, short enough that a client's
# retry is no real wait.
BUSY = Refusal("the database is busy: try again shortly", 5)
# A standby is promoted within seconds of its primary's death (CloudNativePG's failover).
UNAVAILABLE = Refusal("the database is unavailable: try again shortly", 5)


def refusal(error: BaseException) -> Refusal | None:
    """The 503 that answers `error`, if it is the database busy or unavailable."""
    if gave_up_waiting(error):
        return BUSY
    if unavailable(error):
        return UNAVAILABLE
    return None


def gave_up_waiting(error: BaseException) -> bool:
    """Whether `error` is PostgreSQL giving up on a lock wait (lock_timeout) or on a statement
    (statement_timeout, or a cancel), as Django passes it on: an OperationalError caused by it."""
    return isinstance(error, OperationalError) and isinstance(
        error.__cause__, (errors.LockNotAvailable, errors.QueryCanceled)
    )


def unavailable(error: BaseException) -> bool:
    """Whether `error` is the database out of reach: its server ended the connection (a shutdown,
    a crash of another backend, a server still starting or recovering), or this thread's connection
    could not be made or is broken (psycopg marks it closed once its server has gone). Django drops
    a broken one when the request or task ends (CONN_HEALTH_CHECKS), so the next connects afresh,
    to whichever server is the primary by then. An error on a sound connection (a bug) is no outage."""
    if not isinstance(error, OperationalError | InterfaceError):
        return False
    if isinstance(error.__cause__, errors.AdminShutdown | errors.CrashShutdown | errors.CannotConnectNow):
        return True  # Django may have connected again since, as it rolled the transaction back
    held = connection.connection
    return held is None or held.closed
