from django.urls import path

from reservations.api import organisation_views, views

urlpatterns = [
    path("capacity", views.CapacityView.as_view(), name="capacity"),
    path("reservations", views.ReservationListView.as_view(), name="reservation-list"),
    path("reservations/<int:pk>", views.ReservationDetailView.as_view(), name="reservation-detail"),
    path("reservations/<int:pk>/release", views.ReservationReleaseView.as_view(), name="reservation-release"),
    path("reservations/<int:pk>/nodes/<slug:name>/report", views.NodeReportView.as_view(), name="node-report"),
    path(
        "reservations/<int:pk>/nodes/<slug:name>/reboot",
        views.NodePowerView.as_view(action="reboot"),
        name="node-reboot",
    ),
    path(
        "reservations/<int:pk>/nodes/<slug:name>/reinstall",
        views.NodeReinstallView.as_view(),
        name="node-reinstall",
    ),
    path(
        "reservations/<int:pk>/nodes/<slug:name>/power-cycle",
        views.NodePowerView.as_view(action="power-cycle"),
        name="node-power-cycle",
    ),
    path("quota", views.QuotaView.as_view(), name="quota"),
    path("usage", views.UsageView.as_view(), name="usage"),
    path("ssh-keys", views.SSHKeyListView.as_view(), name="ssh-key-list"),
    path("webhooks", views.WebhookListView.as_view(), name="webhook-list"),
    path("webhooks/<int:pk>", views.WebhookDetailView.as_view(), name="webhook-detail"),
    path("webhooks/<int:pk>/deliveries", views.WebhookDeliveryListView.as_view(), name="webhook-deliveries"),
    path(
        "webhooks/<int:pk>/deliveries/<int:delivery>/redeliver",
        views.WebhookRedeliveryView.as_view(),
        name="webhook-redelivery",
    ),
    path("ssh-keys/<int:pk>", views.SSHKeyDetailView.as_view(), name="ssh-key-detail"),
    path("keys", organisation_views.ApiKeyListView.as_view(), name="api-key-list"),
    path("keys/<int:pk>", organisation_views.ApiKeyDetailView.as_view(), name="api-key-detail"),
    path("members", organisation_views.MemberListView.as_view(), name="member-list"),
    path("members/<int:pk>", organisation_views.MemberDetailView.as_view(), name="member-detail"),
    path("members/<int:pk>/sessions", organisation_views.MemberSessionsView.as_view(), name="member-sessions"),
    path("invitations", organisation_views.InvitationListView.as_view(), name="invitation-list"),
    path("activity", organisation_views.ActivityListView.as_view(), name="activity-list"),
]
