from django.urls import path

from attestation.api import views

urlpatterns = [
    path("nodes/<slug:name>/attestation", views.NodeAttestationView.as_view(), name="node-attestation"),
    path("attestation/keys", views.SigningKeysView.as_view(), name="attestation-keys"),
]
