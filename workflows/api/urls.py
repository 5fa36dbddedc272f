from django.urls import path

from workflows.api import views

urlpatterns = [
    path("reservations/<int:pk>/nodes/<slug:name>/console", views.NodeConsoleView.as_view(), name="node-console"),
]
