"""The fleet's API routes that need no viewer. The node reads (NodeListView, NodeDetailView) are
routed by each listener's URLconf, through the policy of who may see what (console/pages/)."""

from django.urls import path

from fleet.api import views

urlpatterns = [
    path("images", views.ImageListView.as_view(), name="image-list"),
    path("config-drives/<str:token>", views.ConfigDriveView.as_view(), name="config-drive"),
]
