"""The pages' routes, in lists for the two listeners.

`private_listener_patterns`: the fleet's read-only pages as the private listener serves them: to
a signed-in viewer, each seeing what console/pages/viewers.py lets it (an operator every name).
`public_listener_patterns`: the same pages as the public listener serves them: to anyone, naming no one.
`tenant_patterns`: pages behind a login, and the login itself: the private listener only. The
tenant's page posts its forms to its own URL (reserve) and to siblings under `my/`, POST only.
With single sign-on on (settings.OIDC_ENABLED), mozilla-django-oidc's routes under `oidc/` too.
"""

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console.pages import views


def read_only_patterns(*, public_listener: bool) -> list:
    def page(view):
        return view.as_view(public_listener=public_listener)

    return [
        path("", page(views.FloorView), name="floor"),
        path("nodes/<slug:name>", page(views.NodeView), name="node"),
        path("incidents", page(views.IncidentsView), name="incidents"),
        path("incidents/<slug:key>/replay", page(views.IncidentReplayView), name="incident-replay"),
        path("remediations", page(views.RemediationsView), name="remediations"),
    ]


private_listener_patterns = read_only_patterns(public_listener=False)
public_listener_patterns = read_only_patterns(public_listener=True)

tenant_patterns = [
    path("my/reservations", views.MyReservationsView.as_view(), name="my-reservations"),
    path("my/reservations/<int:pk>/extend", views.ExtendReservationView.as_view(), name="my-reservation-extend"),
    path(
        "my/reservations/<int:pk>/node-count",
        views.ChangeNodeCountView.as_view(),
        name="my-reservation-node-count",
    ),
    path("my/reservations/<int:pk>/release", views.ReleaseReservationView.as_view(), name="my-reservation-release"),
    path(
        "my/webhooks/<int:webhook>/deliveries/<int:delivery>/redeliver",
        views.RedeliverWebhookView.as_view(),
        name="my-webhook-redeliver",
    ),
    path("my/organisation", views.ChooseOrganisationView.as_view(), name="my-organisation"),
    path("invitations/<str:token>", views.InvitationView.as_view(), name="invitation"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    *([path("oidc/", include("mozilla_django_oidc.urls"))] if settings.OIDC_ENABLED else []),
]
