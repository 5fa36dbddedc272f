from django.contrib import admin, messages

from core.admin_inlines import PaginatedInline
from core.admin_permissions import has_permission
from remediation import services
from remediation.models import BMCEventLogCursor, IncidentEvent, Remediation, RemediationStatus


class IncidentEventInline(PaginatedInline):
    model = IncidentEvent
    can_delete = False
    fields = readonly_fields = ("at", "step", "detail")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Remediation)
class RemediationAdmin(admin.ModelAdmin):
    list_display = ["at", "alert", "node", "gpu", "action", "status", "reason"]
    list_filter = ["status", "action", "alert"]
    search_fields = ["node__name", "fingerprint", "reason"]
    list_select_related = ["node"]
    readonly_fields = [f.name for f in Remediation._meta.fields]
    inlines = [IncidentEventInline]
    actions = ["apply_suppressed"]

    has_apply_remediation_permission = has_permission("remediation.apply_remediation")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(
        description="Apply the selected suppressed remediations (quarantine as an operator)",
        permissions=["apply_remediation"],
    )
    def apply_suppressed(self, request, queryset):
        applied = [
            services.apply_suppressed(remediation_id=r.pk, operator=f"operator:{request.user.get_username()}")
            for r in queryset.filter(status=RemediationStatus.SUPPRESSED).order_by("pk")
        ]
        done = sum(r.status == RemediationStatus.APPLIED for r in applied)
        self.message_user(request, f"Applied {done} of {len(applied)} suppressed remediation(s)", messages.SUCCESS)


@admin.register(BMCEventLogCursor)
class BMCEventLogCursorAdmin(admin.ModelAdmin):
    """How far each BMC's event log was read, and which BMCs could not be: read-only, the sweep keeps it.
    The entries it acted on are remediations, with the alert BMCCriticalEvent or BMCWarningEvent."""

    list_display = ["node", "last_entry_id", "last_entry_created", "read_at", "failure"]
    search_fields = ["node__name", "failure"]
    list_select_related = ["node"]
    readonly_fields = [f.name for f in BMCEventLogCursor._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
