"""The operators' catalogue of OS images tenants may boot."""

from django.db import models
from django.db.models import Q

# A SHA-256 digest as stored: lower-case hex.
SHA256_HEX = r"^[0-9a-f]{64}$"


class Image(models.Model):
    """An OS image tenants may boot, from the operators' catalogue (GET /v1/images)."""

    class BootMode(models.TextChoices):
        UEFI = "UEFI"
        LEGACY = "Legacy"

    name = models.SlugField(max_length=64, unique=True)
    os = models.CharField(max_length=64, help_text="The OS family and release, e.g. ubuntu-24.04.")
    url = models.URLField(max_length=500, help_text="Where a BMC fetches it as virtual media.")
    sha256 = models.CharField(max_length=64, help_text="What the node must report it booted (hex).")
    boot_mode = models.CharField(max_length=8, choices=BootMode.choices, default=BootMode.UEFI)
    needs_secure_boot = models.BooleanField(default=False)
    default = models.BooleanField(default=False, help_text="What a reservation that names no image boots.")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(sha256__regex=SHA256_HEX), name="image_sha256_is_hex"),
            models.UniqueConstraint(fields=["default"], condition=Q(default=True), name="image_one_default"),
        ]

    def __str__(self) -> str:
        return self.name
