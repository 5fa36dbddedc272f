"""Firmware baselines: what every node of a class must run, component by component."""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from core.constraints import json_type_is
from core.validation import Invalid
from fleet import firmware
from fleet.models.images import SHA256_HEX


class FirmwareBaseline(models.Model):
    """What every node of a class (its GPU model) must run: each firmware component's version and
    digest and the image that installs them, BIOS attributes, Secure Boot. Inspection compares a
    node with it after every wipe and repairs or quarantines (fleet/firmware.py)."""

    name = models.SlugField(max_length=64, unique=True)
    gpu_model = models.CharField(
        max_length=128, blank=True, help_text="Nodes with this GPU model; empty: every node no other baseline matches."
    )
    bios_attributes = models.JSONField(
        default=dict,
        blank=True,
        help_text='Attributes the BIOS must hold, as its Redfish Bios resource names them: {"SriovEnable": true}.',
    )
    secure_boot_required = models.BooleanField(default=True)
    boot_releases = models.JSONField(
        default=list,
        blank=True,
        help_text="The boot-chain releases (bootloader, kernel, initrd, service image...) nodes of this class may "
        'boot, as the reference values name them: ["vmlinuz-6.8.0-49-generic", ...]. Empty: every imported '
        "release not retired.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["gpu_model", "name"]
        constraints = [
            models.UniqueConstraint(fields=["gpu_model"], name="firmware_baseline_one_per_node_class"),
            models.CheckConstraint(
                condition=json_type_is("bios_attributes", "object"),
                name="firmware_baseline_bios_attributes_object",
            ),
            models.CheckConstraint(
                condition=json_type_is("boot_releases", "array"),
                name="firmware_baseline_boot_releases_array",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        for field, parse in (
            ("bios_attributes", firmware.parse_bios_attributes),
            ("boot_releases", firmware.parse_boot_releases),
        ):
            try:
                parse(getattr(self, field), field)
            except Invalid as error:
                raise ValidationError({field: str(error)}) from error

    def as_baseline(self) -> firmware.Baseline:
        return firmware.Baseline(
            name=self.name,
            gpu_model=self.gpu_model,
            components={c.component: firmware.Expected(c.version, c.sha256, c.image) for c in self.components.all()},
            bios_attributes=dict(self.bios_attributes),
            secure_boot_required=self.secure_boot_required,
            boot_releases=tuple(self.boot_releases),
        )


class FirmwareBaselineComponent(models.Model):
    """One component a baseline expects: by kind (a Redfish SoftwareId, "VBIOS": every GPU's) or by
    one component's name ("GPU3 VBIOS"), which wins over its kind."""

    baseline = models.ForeignKey(FirmwareBaseline, on_delete=models.CASCADE, related_name="components")
    component = models.CharField(max_length=64, help_text='"BIOS", "BMC", "VBIOS", "NIC", or one: "NIC0".')
    version = models.CharField(max_length=128)
    sha256 = models.CharField(max_length=64, verbose_name="SHA-256", help_text="Its digest (lower-case hex).")
    image = models.CharField(
        max_length=200,
        blank=True,
        help_text="The file that installs it, under GPUFLEET_FIRMWARE_IMAGE_BASE_URL; empty: a drift quarantines.",
    )

    class Meta:
        ordering = ["baseline", "component"]
        constraints = [
            models.UniqueConstraint(fields=["baseline", "component"], name="firmware_component_once_per_baseline"),
            models.CheckConstraint(
                condition=Q(component__regex=f"^{firmware.COMPONENT.pattern}$"), name="firmware_component_named"
            ),
            models.CheckConstraint(condition=~Q(version=""), name="firmware_component_has_version"),
            models.CheckConstraint(condition=Q(sha256__regex=SHA256_HEX), name="firmware_component_sha256_is_hex"),
            models.CheckConstraint(
                condition=Q(image="") | Q(image__regex=f"^{firmware.IMAGE.pattern}$"),
                name="firmware_component_image_is_a_file_name",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.baseline.name} {self.component} {self.version}"
