"""The NoCloud config drive a serving node's BMC fetches."""

from django.db import models
from django.db.models.functions import Now

from fleet.models.nodes import Node


class ConfigDrive(models.Model):
    """A serving node's NoCloud config drive, served to its BMC at an unguessable URL until release."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="config_drive")
    token = models.CharField(max_length=64, unique=True)
    iso = models.BinaryField()
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"config drive of {self.node.name}"
