from django.contrib import admin

from attestation.models import AttestationPolicy, AttestationResult, ReferenceValue, TrustAnchor


@admin.register(TrustAnchor)
class TrustAnchorAdmin(admin.ModelAdmin):
    """Saved only if the verifier can end chains at the certificate (model clean)."""

    list_display = ["role", "imported_at"]
    readonly_fields = ["imported_at"]


@admin.register(ReferenceValue)
class ReferenceValueAdmin(admin.ModelAdmin):
    list_display = ["release", "component", "digest", "imported_at"]
    list_filter = ["release", "component"]
    search_fields = ["digest", "release"]


@admin.register(AttestationPolicy)
class AttestationPolicyAdmin(admin.ModelAdmin):
    """Saved only if the strict loader accepts the policy (model clean)."""

    list_display = ["name", "gpu_model", "updated_at"]


@admin.register(AttestationResult)
class AttestationResultAdmin(admin.ModelAdmin):
    list_display = ["at", "node", "affirming", "policy", "kid"]
    list_filter = ["affirming", "policy"]
    search_fields = ["node__name", "nonce"]
    list_select_related = ["node"]
    readonly_fields = ["node", "at", "nonce", "affirming", "failures", "measurements", "policy", "kid", "token"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
