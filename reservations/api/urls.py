from django.urls import path

from reservations.api import views

urlpatterns = [
    path("capacity", views.CapacityView.as_view(), name="capacity"),
    path("reservations", views.ReservationListView.as_view(), name="reservation-list"),
    path("reservations/<int:pk>", views.ReservationDetailView.as_view(), name="reservation-detail"),
    path("reservations/<int:pk>/release", views.ReservationReleaseView.as_view(), name="reservation-release"),
    path("reservations/<int:pk>/nodes/<slug:name>/report", views.NodeReportView.as_view(), name="node-report"),
    path("ssh-keys", views.SSHKeyListView.as_view(), name="ssh-key-list"),
    path("ssh-keys/<int:pk>", views.SSHKeyDetailView.as_view(), name="ssh-key-detail"),
]
