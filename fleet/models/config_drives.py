"""The NoCloud config drives a node's BMC fetches: one per credential, its boot's or its tenancy's."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from core.constraints import json_type_is
from fleet import agent_credentials, nocloud
from fleet.models.node_credentials import NodeCredential
from fleet.models.nodes import Node


class ConfigDrive(models.Model):
    """A node's config drive for one boot of the service image or one tenancy, served to its BMC
    at an unguessable URL until its credential is revoked (then 404). The row keeps cloud-init's
    files; the agent's credentials are added as the drive is served, never stored."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="config_drives")
    credential = models.OneToOneField(NodeCredential, on_delete=models.CASCADE, related_name="config_drive")
    token = models.CharField(max_length=64, unique=True)
    files = models.JSONField(help_text="cloud-init's files on the drive: name -> text.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.CheckConstraint(condition=json_type_is("files", "object"), name="config_drive_files_object")
        ]

    def __str__(self) -> str:
        return f"config drive of {self.node.name}"

    @property
    def iso(self) -> bytes:
        """The drive as the BMC reads it: cloud-init's files and gpu-agent.json, whose secrets are
        derived from the credential as it is served."""
        credential = self.credential
        secrets = agent_credentials.agent_secrets(settings.SECRET_KEY, node_id=self.node_id, nonce=credential.nonce)
        return nocloud.iso({**self.files, agent_credentials.DRIVE_FILE: secrets.drive_file(self.node.name)})
