from django.apps import AppConfig


class AttestationConfig(AppConfig):
    name = "attestation"
