from django.urls import path

from remediation.api import views

urlpatterns = [
    path("alerts/alertmanager", views.AlertmanagerWebhookView.as_view(), name="alertmanager-webhook"),
    path("agents/<str:node>/xids", views.AgentXidReportView.as_view(), name="agent-xid-report"),
    path("prometheus/targets", views.PrometheusTargetsView.as_view(), name="prometheus-targets"),
]
