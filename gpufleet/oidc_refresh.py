"""mozilla-django-oidc's SessionRefresh, with an answer htmx acts on (settings.OIDC_MIDDLEWARE).

Once the ID token's renewal is due, SessionRefresh sends a GET to the provider for a silent sign-in
(prompt=none), and back to the URL asked for. An htmx request (the fleet floor's poll every 2 s)
is an XHR, which would follow that redirect itself, across origins, and fail: the page would stop
updating and never renew. htmx navigates the whole page where an answer carries HX-Redirect, so
such a request gets that instead: the browser goes to the provider and comes back to the page,
whose URL htmx polls (console/pages/views.py answers it whole or in part).
"""

from django_htmx.http import HttpResponseClientRedirect
from mozilla_django_oidc import middleware


class HtmxAwareSessionRefresh(middleware.SessionRefresh):
    """SessionRefresh, whose redirect to the provider an htmx request gets as HX-Redirect."""

    def process_request(self, request):
        response = super().process_request(request)
        # The header itself: django_htmx's middleware, which sets request.htmx, comes later.
        if response is not None and response.status_code == 302 and request.headers.get("HX-Request") == "true":
            return HttpResponseClientRedirect(response.url)
        return response
