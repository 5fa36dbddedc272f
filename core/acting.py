"""Who a request acts as, for the audit rows it writes: the person (a username) and the API key
(its prefix, never the key). Pure: no Django.

A request's scope is opened by gpufleet.middleware.WhoActs, which names the signed-in user; the
API's key authentication names the key's user and prefix once it has looked the key up. Audit
models take both as their fields' defaults, so every row written while the request runs names
them, whichever service writes it. Outside a request (workers, beat, commands) both are empty: the
row's `actor` says which process acted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class Who:
    user: str = ""
    key: str = ""
    # Asked for the user's name only when an audit row needs it: a request that writes none never
    # loads its session's user.
    user_source: Callable[[], str] | None = None

    def username(self) -> str:
        if self.user_source is not None:
            self.user, self.user_source = self.user_source(), None
        return self.user


_who: ContextVar[Who | None] = ContextVar("who_acts", default=None)


@contextmanager
def request_scope(user_source: Callable[[], str] | None = None) -> Iterator[Who]:
    """The scope of one request, its user named by `user_source` when first asked for: what is
    named in it is forgotten when it ends."""
    token = _who.set(Who(user_source=user_source))
    try:
        yield _who.get() or Who()
    finally:
        _who.reset(token)


def name(*, user: str, key: str = "") -> None:
    """Name who the current request acts as (nothing happens outside a request's scope)."""
    who = _who.get()
    if who is not None:
        who.user, who.key, who.user_source = user, key, None


def user() -> str:
    who = _who.get()
    return who.username() if who is not None else ""


def key() -> str:
    who = _who.get()
    return who.key if who is not None else ""
