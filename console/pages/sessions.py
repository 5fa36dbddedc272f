"""What a browser's session remembers about who is signed in: the organisation its pages act for,
and when it signed in. An admin's sign-out of a member (Membership.signed_out_at) ends, for that
organisation, every session of the member that signed in before it: they sign in again."""

from __future__ import annotations

from datetime import datetime

from django.contrib.sessions.backends.base import SessionBase

from console.pages.selectors import Standing, standing_of
from core import clock

ORGANISATION = "organisation"  # the organisation a member's pages act for, picked on the tenant page
SIGNED_IN_AT = "signed_in_at"  # ISO 8601, written at each sign-in (password or single sign-on)


def note_sign_in(sender, request, user, **kwargs) -> None:
    """user_logged_in's receiver: the session's sign-in time."""
    request.session[SIGNED_IN_AT] = clock.now().isoformat()


def standing_in_session(user, session: SessionBase, chosen: str | None = None) -> Standing | None:
    """standing_of for a signed-in browser: the organisation `chosen`, or else the one picked in
    the session, among those that have not signed the user out since the session signed in (a
    session from before sign-in times were kept counts as signed in long ago)."""
    noted = session.get(SIGNED_IN_AT)
    signed_in_at = datetime.fromisoformat(noted) if isinstance(noted, str) else None
    return standing_of(user, chosen if chosen is not None else session.get(ORGANISATION), signed_in_at=signed_in_at)
