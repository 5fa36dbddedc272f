from django.contrib import admin

from attestation import gpu_rims_import, services
from attestation.models import AttestationPolicy, AttestationResult, GpuRim, ReferenceValue, TrustAnchor


@admin.register(TrustAnchor)
class TrustAnchorAdmin(admin.ModelAdmin):
    """Saved only if the verifier can end chains at the certificate (model clean)."""

    list_display = ["role", "imported_at"]
    readonly_fields = ["imported_at"]


@admin.register(ReferenceValue)
class ReferenceValueAdmin(admin.ModelAdmin):
    """Retiring acts on whole releases: every component's digests of each selected value's release."""

    list_display = ["release", "component", "digest", "imported_at", "retired_at"]
    list_filter = [("retired_at", admin.EmptyFieldListFilter), "release", "component"]
    search_fields = ["digest", "release"]
    readonly_fields = ["retired_at"]
    actions = ["retire", "return_to_service"]

    @admin.action(
        description="Retire the selected values' releases (nodes booting them fail attestation)", permissions=["change"]
    )
    def retire(self, request, queryset):
        releases = sorted(set(queryset.values_list("release", flat=True)))
        retired = services.retire_releases(releases)
        self._record(request, queryset, "retired")
        self.message_user(request, f"{retired} of {len(releases)} releases retired: {', '.join(releases)}")

    @admin.action(description="Return the selected values' releases to service", permissions=["change"])
    def return_to_service(self, request, queryset):
        releases = sorted(set(queryset.values_list("release", flat=True)))
        returned = services.return_releases_to_service(releases)
        self._record(request, queryset, "returned to service")
        self.message_user(request, f"{returned} of {len(releases)} releases returned to service: {', '.join(releases)}")

    def _record(self, request, queryset, what: str) -> None:
        for value in queryset:
            self.log_change(request, value, f"release {value.release} {what}")


@admin.register(GpuRim)
class GpuRimAdmin(admin.ModelAdmin):
    """Imported only by manage.py import_gpu_rims (NVIDIA-signed, as signed); operators retire them."""

    list_display = ["rim_id", "component", "version", "chip", "valid_until", "imported_at", "retired_at"]
    list_filter = [("retired_at", admin.EmptyFieldListFilter), "component", "chip"]
    search_fields = ["rim_id", "version"]
    actions = ["retire", "return_to_service"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        # The list's actions need the permission; the form shows every field read-only.
        return obj is None and super().has_change_permission(request)

    @admin.action(
        description="Retire the selected RIMs' releases (GPUs running them fail verification)", permissions=["change"]
    )
    def retire(self, request, queryset):
        rim_ids = sorted(queryset.values_list("rim_id", flat=True))
        retired = gpu_rims_import.retire_gpu_rims(rim_ids)
        self._record(request, queryset, "retired")
        self.message_user(request, f"{retired} of {len(rim_ids)} RIMs retired: {', '.join(rim_ids)}")

    @admin.action(description="Return the selected RIMs' releases to service", permissions=["change"])
    def return_to_service(self, request, queryset):
        rim_ids = sorted(queryset.values_list("rim_id", flat=True))
        returned = gpu_rims_import.return_gpu_rims_to_service(rim_ids)
        self._record(request, queryset, "returned to service")
        self.message_user(request, f"{returned} of {len(rim_ids)} RIMs returned to service: {', '.join(rim_ids)}")

    def _record(self, request, queryset, what: str) -> None:
        for rim in queryset:
            self.log_change(request, rim, f"RIM {rim.rim_id} {what}")


@admin.register(AttestationPolicy)
class AttestationPolicyAdmin(admin.ModelAdmin):
    """Saved only if the strict loader accepts the policy (model clean)."""

    list_display = ["name", "gpu_model", "updated_at"]


@admin.register(AttestationResult)
class AttestationResultAdmin(admin.ModelAdmin):
    list_display = ["at", "node", "kind", "affirming", "policy", "kid"]
    list_filter = ["kind", "affirming", "policy"]
    search_fields = ["node__name", "nonce"]
    list_select_related = ["node"]
    readonly_fields = ["node", "at", "kind", "nonce", "affirming", "failures", "measurements", "policy", "kid", "token"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
