"""What the verifier is configured with (trust anchors, reference values, policies) and every
verdict it signed. The pure checks live in attestation/verifier/ and attestation/policy.py."""

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from attestation.policy import PolicyError, load_policy
from attestation.verifier import UnusableAnchor, load_trust_anchor
from core import clock


class TrustAnchorRole(models.TextChoices):
    MANUFACTURER_CA = "manufacturer_ca", "Manufacturer CA (attestation keys)"
    GPU_VENDOR_ROOT = "gpu_vendor_root", "GPU vendor root (device keys)"
    # NVIDIA's own roots, for real GPUs' evidence (manage.py verify_gpu_evidence) and RIMs
    # (manage.py import_gpu_rims); appraisal needs neither, so neither is required.
    NVIDIA_DEVICE_ROOT = "nvidia_device_root", "NVIDIA Device Identity CA (GPU device keys)"
    NVIDIA_RIM_ROOT = "nvidia_rim_root", "NVIDIA RIM root (reference integrity manifests)"


# The roles appraisal cannot go without (services.trusted_roots).
REQUIRED_ROLES = (TrustAnchorRole.MANUFACTURER_CA, TrustAnchorRole.GPU_VENDOR_ROOT)


class TrustAnchor(models.Model):
    role = models.CharField(max_length=32, choices=TrustAnchorRole.choices, unique=True)
    pem = models.TextField()
    imported_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["role"]
        constraints = [
            models.CheckConstraint(condition=Q(role__in=TrustAnchorRole.values), name="trust_anchor_role_known")
        ]

    def __str__(self):
        return self.get_role_display()

    def clean(self):
        try:
            load_trust_anchor(self.role, self.pem, valid_at=clock.now())
        except UnusableAnchor as error:
            raise ValidationError({"pem": str(error)}) from error


class ReferenceValue(models.Model):
    """A golden digest of one measured component of one firmware or image release."""

    release = models.CharField(max_length=128)
    component = models.CharField(max_length=64, help_text='A boot component, or "gpu.<measurement>".')
    digest = models.CharField(max_length=128, help_text="Lowercase hex.")
    imported_at = models.DateTimeField(db_default=Now())
    retired_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When operators retired its release: a node that still boots it fails attestation, release_retired.",
    )

    class Meta:
        ordering = ["release", "component"]
        constraints = [
            models.UniqueConstraint(fields=["release", "component", "digest"], name="reference_value_once"),
            models.CheckConstraint(condition=Q(digest__regex=r"^[0-9a-f]{64,128}$"), name="reference_digest_hex"),
        ]

    def __str__(self):
        return f"{self.release} {self.component} {self.digest[:16]}…"


class GpuRimComponent(models.TextChoices):
    DRIVER = "driver", "GPU driver"
    VBIOS = "vbios", "VBIOS"


class GpuRim(models.Model):
    """One of NVIDIA's reference integrity manifests: the golden measurements of one GPU driver or
    VBIOS release, kept as signed (attestation/gpu_rims_import.py verified it against the RIM root)."""

    rim_id = models.CharField(
        max_length=128, unique=True, help_text="NVIDIA's id: NV_GPU_DRIVER_<chip>_<version> or NV_GPU_VBIOS_<…>."
    )
    component = models.CharField(max_length=8, choices=GpuRimComponent.choices)
    version = models.CharField(max_length=32, help_text="Its colloquialVersion, lowercase.")
    chip = models.CharField(max_length=32)
    tag_id = models.CharField(max_length=255)
    valid_from = models.DateTimeField(help_text="When every certificate of its signing chain is valid.")
    valid_until = models.DateTimeField()
    golden = models.JSONField(help_text="The active measurement indexes: {index: [SHA-384 hex, …]}.")
    xml = models.TextField(help_text="The signed document, as NVIDIA published it.")
    sha384 = models.CharField(max_length=96, help_text="Of the signed document.")
    imported_at = models.DateTimeField(db_default=Now())
    retired_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When operators retired its release: evidence of that driver or VBIOS fails verification.",
    )

    class Meta:
        ordering = ["component", "chip", "version"]
        verbose_name = "GPU RIM"
        constraints = [
            models.CheckConstraint(condition=Q(component__in=GpuRimComponent.values), name="gpu_rim_component_known"),
            models.CheckConstraint(condition=Q(sha384__regex=r"^[0-9a-f]{96}$"), name="gpu_rim_sha384_hex"),
        ]

    def __str__(self):
        return self.rim_id


class OcspSource(models.TextChoices):
    FETCHED = "fetched", "Fetched from the issuer's responder"
    IMPORTED = "imported", "Imported by an operator"


class OcspResponse(models.Model):
    """An OCSP answer for one certificate (its serial under one issuer's key), kept as signed with
    its validity; the newest one fetched or imported for that certificate (attestation/ocsp.py).
    Whether it is good at a time is attestation/verifier/revocation.py's to say."""

    serial_number = models.CharField(max_length=64, help_text="The certificate's serial, lowercase hex.")
    issuer_key_hash = models.CharField(
        max_length=128, help_text="Of the issuer's public key, lowercase hex, by the answer's hash algorithm."
    )
    der = models.BinaryField(help_text="The answer, DER, as the responder signed it.")
    this_update = models.DateTimeField()
    next_update = models.DateTimeField(null=True, blank=True, help_text="None: the responder gave no nextUpdate.")
    fetched_at = models.DateTimeField(help_text="When it was fetched or imported.")
    source = models.CharField(max_length=8, choices=OcspSource.choices)

    class Meta:
        ordering = ["serial_number", "issuer_key_hash"]
        verbose_name = "OCSP response"
        constraints = [
            models.UniqueConstraint(fields=["serial_number", "issuer_key_hash"], name="ocsp_response_per_certificate"),
            models.CheckConstraint(condition=Q(source__in=OcspSource.values), name="ocsp_response_source_known"),
        ]

    def __str__(self):
        return f"OCSP {self.serial_number} ({self.this_update:%Y-%m-%d %H:%M})"


class AttestationPolicy(models.Model):
    """A strict policy (attestation/policy.py) for one node class: the GPU model of its nodes."""

    name = models.SlugField(max_length=64, unique=True)
    gpu_model = models.CharField(max_length=128, blank=True, help_text="Nodes with this GPU model; empty: any other.")
    source = models.TextField(help_text="The policy in TOML; unknown or missing keys are refused.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["gpu_model", "name"]
        verbose_name_plural = "attestation policies"
        constraints = [models.UniqueConstraint(fields=["gpu_model"], name="one_policy_per_node_class")]

    def __str__(self):
        return self.name

    def clean(self):
        try:
            load_policy(self.source, format="toml")
        except PolicyError as error:
            raise ValidationError({"source": str(error)}) from error

    def load(self):
        return load_policy(self.source, format="toml")


class ResultKind(models.TextChoices):
    INSPECTION = "inspection", "Inspection (the verdict on fresh evidence)"
    HANDOFF = "handoff", "Handoff to a tenant (the inspection's verdict, with the tenant's networks)"


class AttestationResult(models.Model):
    """One signed verdict on one node's evidence: the JWT is the proof, the rest is for searching.
    A handoff's result signs its inspection's verdict again (its nonce, failures and measurements
    too) with the networks the node was handed on."""

    node = models.ForeignKey("fleet.Node", on_delete=models.PROTECT, related_name="attestations")
    kind = models.CharField(max_length=16, choices=ResultKind.choices, default=ResultKind.INSPECTION)
    at = models.DateTimeField(db_default=Now(), db_index=True)
    nonce = models.CharField(max_length=128)
    affirming = models.BooleanField()
    failures = models.JSONField(default=list, blank=True)
    measurements = models.JSONField(default=dict, blank=True)
    gpu_evidence = models.JSONField(
        null=True,
        blank=True,
        help_text="What each GPU's SPDM evidence came to, per source the policy required (the result's `gpus`).",
    )
    policy = models.CharField(max_length=64)
    kid = models.CharField(max_length=64, help_text="The signing key's id, as in the JWKS.")
    token = models.TextField(help_text="The signed result (EAR JWT, EdDSA).")

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(affirming=True) & Q(failures=[])) | (Q(affirming=False) & ~Q(failures=[])),
                name="attestation_affirms_exactly_without_failures",
            ),
            models.CheckConstraint(condition=Q(kind__in=ResultKind.values), name="attestation_result_kind_known"),
        ]

    def __str__(self):
        return f"{self.node} {'affirming' if self.affirming else 'contraindicated'} {self.at:%Y-%m-%d %H:%M:%S}"
