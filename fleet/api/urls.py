from django.urls import path

from fleet.api import views

urlpatterns = [
    path("nodes", views.NodeListView.as_view(), name="node-list"),
    path("nodes/<slug:name>", views.NodeDetailView.as_view(), name="node-detail"),
    path("images", views.ImageListView.as_view(), name="image-list"),
    path("config-drives/<str:token>", views.ConfigDriveView.as_view(), name="config-drive"),
]
