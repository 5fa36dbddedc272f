"""The pages' routes, in two lists for the two listeners.

`public_patterns`: read-only pages for anyone, on the private and the public listener.
`tenant_patterns`: pages behind a login, and the login itself: the private listener only.
"""

from django.contrib.auth import views as auth_views
from django.urls import path

from fleet.pages import views

public_patterns = [
    path("", views.FloorView.as_view(), name="floor"),
    path("nodes/<slug:name>", views.NodeView.as_view(), name="node"),
    path("incidents", views.IncidentsView.as_view(), name="incidents"),
    path("incidents/<slug:key>/replay", views.IncidentReplayView.as_view(), name="incident-replay"),
    path("remediations", views.RemediationsView.as_view(), name="remediations"),
]

tenant_patterns = [
    path("my/reservations", views.MyReservationsView.as_view(), name="my-reservations"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]
