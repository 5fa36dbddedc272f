"""Who is looking, and so what they may see: the one policy that the pages and the private
listener's fleet reads ask (console/pages/disclosure.py says what each Disclosure shows).

On the public listener anyone sees the public view, whoever they are signed in as (a browser sends
the private listener's session cookie to any port of the same host). On the private listener an
operator (staff) sees everything; a signed-in tenant the public view plus its own names; any other
signed-in user the public view; an anonymous caller nothing: pages send it to the login page, the
API answers 401.
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.contrib.sessions.backends.base import SessionBase
from rest_framework import generics
from rest_framework.authentication import SessionAuthentication
from rest_framework.views import APIView

from console.pages.disclosure import EVERYTHING, Disclosure, PublicDisclosure, TenantDisclosure
from console.pages.sessions import standing_in_session
from core.prometheus_auth import is_operator
from reservations.services.api_keys import Caller

SIGN_IN = "sign in: an operator, or a tenant with its API token"


def disclosure_for(user, *, public_listener: bool = False, session: SessionBase | None = None) -> Disclosure | None:
    """The Disclosure for `user` (a request's, None or anonymous when nobody signed in) acting for
    the organisation its `session` picked (console.pages.sessions) on this listener, or None when
    it may see nothing here."""
    if public_listener:
        return PublicDisclosure()
    if user is None or not user.is_authenticated:
        return None
    if is_operator(user):
        return EVERYTHING
    standing = standing_in_session(user, session) if session is not None else None
    if standing is None:
        return PublicDisclosure()
    return TenantDisclosure(standing.tenant, username=user.get_username())


class DisclosedPage:
    """A page's view mixin: sets `self.disclosure` for the viewer, or sends an anonymous browser
    to the login page and back. `public_listener` is True where the public URLconf routes to it."""

    public_listener = False
    disclosure: Disclosure

    def dispatch(self, request, *args, **kwargs):
        # The public listener has no sessions, so no request.user: it shows everyone the same.
        disclosure = disclosure_for(
            getattr(request, "user", None),
            public_listener=self.public_listener,
            session=None if self.public_listener else request.session,
        )
        if disclosure is None:
            return redirect_to_login(request.get_full_path())
        self.disclosure = disclosure
        return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]


# The tenant's own API credentials first: its scheme is what a 401's WWW-Authenticate names. Then
# the session of a browser signed in on the login page (an operator's, or a tenant's).
SIGNED_IN = [*APIView.authentication_classes, SessionAuthentication]  # the former: the API's default


class DisclosedAPIView(generics.GenericAPIView):
    """The first base of an API view on the private listener: signed-in viewers only (an anonymous
    caller is a 401), and the Disclosure the policy picks for the caller in the serializers' context."""

    disclosure: Disclosure

    def get_authenticators(self):
        return [authentication() for authentication in SIGNED_IN]

    def check_permissions(self, request):
        """The policy's, instead of the view's permission classes."""
        caller = request.auth
        disclosure: Disclosure | None
        if isinstance(caller, Caller):
            # A key acts for its organisation, whoever made it: an operator's key as a member shows
            # the organisation's view (operators sign in for theirs).
            disclosure = TenantDisclosure(caller.tenant, username=caller.user.get_username())
        else:
            disclosure = disclosure_for(request.user, session=request.session)
        if disclosure is None:
            self.permission_denied(request, message=SIGN_IN)
        self.disclosure = disclosure

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "disclosure": self.disclosure}
