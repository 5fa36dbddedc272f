"""The operators' console. State changes go through fleet.services.transition, never a form field;
BMC access changes through fleet.services.change_bmc_access, and only with the password re-entered.
"""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db import models
from django.db.models import Case, When
from django.template.response import TemplateResponse

from core.admin_inlines import PaginatedInline
from core.admin_permissions import ViewOnlyAdmin, has_permission
from fleet import firmware_rollouts, lifecycle, rollout_rules
from fleet.bmc_access import BMCAddressRefused, check_bmc_url
from fleet.models import (
    GPU,
    AddressPool,
    AuditEvent,
    FabricSwitch,
    FirmwareBaseline,
    FirmwareBaselineComponent,
    FirmwareRollout,
    FirmwareRolloutNode,
    Image,
    NetworkAttachment,
    Node,
    NodeAddress,
    Pod,
    Rack,
    SegmentPool,
    TenantNetwork,
)
from fleet.selectors import rollout_progress
from fleet.services import (
    BMC_ACCESS_FIELDS,
    SECRET_ACCESS_FIELDS,
    change_bmc_access,
    transition,
)

# What the form shows of a node's BMC and agent access: all of it but the stored secrets.
BMC_ACCESS_FORM_FIELDS = [f for f in BMC_ACCESS_FIELDS if f not in SECRET_ACCESS_FIELDS]
SECRET_INPUTS = ["reentered_password"]


class RackInline(PaginatedInline):
    model = Rack
    show_change_link = True


@admin.register(Pod)
class PodAdmin(admin.ModelAdmin):
    list_display = ["name"]
    inlines = [RackInline]


@admin.register(Rack)
class RackAdmin(admin.ModelAdmin):
    list_display = ["name", "pod"]
    list_filter = ["pod"]


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    can_delete = False
    fields = ("index", "uuid", "serial", "model", "health")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


class QuarantineForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))


class NodeForm(forms.ModelForm):
    """A BMC's address, system id, username and agent URL change only with its password entered
    anew: whoever points the node's BMC elsewhere gets the password they typed, never the real one.
    The agent has no token to enter: its credentials are minted per boot and per tenancy."""

    reentered_password = forms.CharField(
        label="BMC password",
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Never shown. Enter it to change how the BMC is reached (and to set a new password).",
    )

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        changed = [f for f in BMC_ACCESS_FORM_FIELDS if f in self.changed_data]
        if not cleaned.get("reentered_password"):
            if changed:
                self.add_error("reentered_password", f"Enter the BMC's password to change {', '.join(changed)}.")
            return cleaned
        for field in ("redfish_url", "agent_url"):
            if cleaned.get(field):
                try:
                    check_bmc_url(cleaned[field])
                except BMCAddressRefused as exc:
                    self.add_error(field, str(exc))
        return cleaned


def _apply(modeladmin, request, queryset, event: lifecycle.Event, reason: str = ""):
    applied = []
    for node in queryset.order_by("pk"):
        try:
            transition(node_id=node.pk, event=event, actor=f"operator:{request.user.get_username()}", reason=reason)
        except lifecycle.TransitionRefused as exc:
            modeladmin.message_user(request, f"{node.name}: {exc}", messages.ERROR)
        else:
            applied.append(node.name)
    if applied:
        modeladmin.message_user(request, f"Applied {event.value} to {', '.join(applied)}", messages.SUCCESS)


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "state", "pod_name", "rack", "position", "tenant", "step", "quarantine_reason"]
    list_filter = ["state", "rack__pod", "rack"]
    list_select_related = ["rack__pod", "tenant"]
    search_fields = ["name", "serial", "gpus__uuid"]
    inlines = [GPUInline]
    actions = ["quarantine", "return_to_service", "put_into_maintenance"]
    form = NodeForm
    # BMCs on a management network commonly speak plain http.
    formfield_overrides = {models.URLField: {"form_class": forms.URLField, "assume_scheme": "http"}}
    # The stored BMC password is never shown; state fields change only through the actions.
    lifecycle_fields = [
        "state",
        "state_since",
        "tenant",
        "reservation",
        "quarantine_reason",
        "under_repair",
        "step",
        "step_since",
        "lease_owner",
        "lease_expires_at",
        "fencing_token",
        "diagnostic_passed_at",
        "diagnostic_level",
    ]
    readonly_fields = ["name", "rack", "position", *lifecycle_fields]

    has_quarantine_node_permission = has_permission("fleet.quarantine_node")
    has_return_node_to_service_permission = has_permission("fleet.return_node_to_service")
    has_put_node_into_maintenance_permission = has_permission("fleet.put_node_into_maintenance")

    def get_fieldsets(self, request, obj=None):
        access = BMC_ACCESS_FORM_FIELDS
        if self.has_change_permission(request, obj):
            access = [*access, *SECRET_INPUTS]
        return [
            (None, {"fields": ["name", "rack", "position", "serial"]}),
            ("BMC access", {"fields": access, "description": "Changed only with the BMC password; audited."}),
            ("Lifecycle", {"fields": self.lifecycle_fields}),
        ]

    def save_model(self, request, obj, form, change):
        others = [f for f in form.changed_data if f not in BMC_ACCESS_FORM_FIELDS and f not in SECRET_INPUTS]
        if others:
            obj.save(update_fields=others)
        if password := form.cleaned_data.get("reentered_password"):
            change_bmc_access(
                node_id=obj.pk,
                actor=f"operator:{request.user.get_username()}",
                bmc_password=password,
                **{f: form.cleaned_data[f] for f in BMC_ACCESS_FORM_FIELDS},
            )

    @admin.display(description="pod", ordering="rack__pod__name")
    def pod_name(self, node):
        return node.rack.pod.name

    def has_add_permission(self, request):
        return False  # nodes are enrolled from the inventory: manage.py seed_fleet

    def has_delete_permission(self, request, obj=None):
        return False  # a node's audit history outlives it

    @admin.action(description="Quarantine selected nodes (asks a reason)", permissions=["quarantine_node"])
    def quarantine(self, request, queryset):
        form = QuarantineForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            _apply(self, request, queryset, lifecycle.Event.OPERATOR_QUARANTINE, form.cleaned_data["reason"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Quarantine nodes",
            "opts": self.model._meta,
            "nodes": queryset.order_by("name"),
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/fleet/node/quarantine.html", context)

    @admin.action(
        description="Return selected nodes to service (through wiping and inspection)",
        permissions=["return_node_to_service"],
    )
    def return_to_service(self, request, queryset):
        _apply(self, request, queryset, lifecycle.Event.OPERATOR_RETURN)

    @admin.action(description="Put selected nodes into maintenance", permissions=["put_node_into_maintenance"])
    def put_into_maintenance(self, request, queryset):
        _apply(self, request, queryset, lifecycle.Event.OPERATOR_MAINTENANCE)


@admin.register(AuditEvent)
class AuditEventAdmin(ViewOnlyAdmin):
    """Read-only: the database refuses to change or delete an audit row anyway."""

    list_display = ["at", "node", "event", "from_state", "to_state", "actor", "reason"]
    list_filter = ["event", "to_state"]
    search_fields = ["node__name", "actor", "reason"]
    list_select_related = ["node"]
    date_hierarchy = "at"


@admin.register(FabricSwitch)
class FabricSwitchAdmin(ViewOnlyAdmin):
    """Read-only: enrolment names the switches, the fabric sweep reads their health."""

    list_display = ["name", "kind", "fabric_domain", "pod", "health", "state", "links_down", "read_at", "failure"]
    list_filter = ["kind", "health", "pod"]
    search_fields = ["name", "fabric_domain__name", "pod__name"]
    list_select_related = ["fabric_domain__level", "pod"]


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    """The catalogue tenants choose from (GET /v1/images); the one default is what a reservation gets
    when it names none."""

    list_display = ["name", "os", "default", "boot_mode", "needs_secure_boot", "sha256"]
    search_fields = ["name", "os"]
    formfield_overrides = {models.URLField: {"form_class": forms.URLField, "assume_scheme": "https"}}


class NodeAddressInline(PaginatedInline):
    model = NodeAddress
    can_delete = False
    fields = ("address", "node")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False  # assigned with the node as it starts serving, given back at its wipe


@admin.register(AddressPool)
class AddressPoolAdmin(admin.ModelAdmin):
    list_display = ["network", "pod", "gateway", "ssh_port"]
    list_filter = ["pod"]
    inlines = [NodeAddressInline]

    def get_readonly_fields(self, request, obj=None):
        # Addresses handed out from it would fall outside a changed network.
        return ["network", "pod"] if obj is not None and obj.addresses.exists() else []


class FirmwareBaselineComponentInline(admin.TabularInline):
    model = FirmwareBaselineComponent
    extra = 0
    min_num = 1  # a baseline of no component knows none: every node of its class would be quarantined
    validate_min = True
    fields = ["component", "version", "sha256", "image"]


class RollOutForm(forms.Form):
    batch_size = forms.IntegerField(
        min_value=1, initial=rollout_rules.DEFAULT_BATCH_SIZE, help_text="Nodes updated at once, in all."
    )
    per_pod_cap = forms.IntegerField(
        min_value=1, initial=rollout_rules.DEFAULT_PER_POD_CAP, help_text="Nodes of one pod updated at once."
    )


@admin.register(FirmwareBaseline)
class FirmwareBaselineAdmin(admin.ModelAdmin):
    """What inspection holds every node of a class to after every wipe (fleet/firmware.py): a node
    off it is repaired with the baseline's images and settings, or quarantined firmware_drift. An
    operator rolls a changed baseline out to the idle nodes at once (fleet/firmware_rollouts.py)."""

    list_display = ["name", "gpu_model", "secure_boot_required", "updated_at"]
    search_fields = ["name", "gpu_model"]
    readonly_fields = ["updated_at"]
    inlines = [FirmwareBaselineComponentInline]
    actions = ["roll_out"]

    # The rollout model's own permission: leave to edit baselines is no leave to take nodes out of service.
    has_start_firmware_rollout_permission = has_permission("fleet.start_firmware_rollout")

    @admin.action(
        description="Roll out to the fleet (asks batch size and per-pod cap)", permissions=["start_firmware_rollout"]
    )
    def roll_out(self, request, queryset):
        form = RollOutForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            context = {
                **self.admin_site.each_context(request),
                "title": "Roll out firmware baselines",
                "opts": self.model._meta,
                "baselines": queryset.order_by("name"),
                "form": form,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            }
            return TemplateResponse(request, "admin/fleet/firmwarebaseline/roll_out.html", context)
        actor = f"operator:{request.user.get_username()}"
        for baseline in queryset.order_by("name"):
            try:
                rollout = firmware_rollouts.start_rollout(baseline=baseline, actor=actor, **form.cleaned_data)
            except firmware_rollouts.RolloutRefused as refused:
                self.message_user(request, str(refused), messages.ERROR)
            else:
                self.message_user(request, f"Started {rollout}: {rollout_progress(rollout)}", messages.SUCCESS)
        return None


class FirmwareRolloutNodeInline(PaginatedInline):
    """Where each node's update stands: failures first, with their reasons."""

    model = FirmwareRolloutNode
    can_delete = False
    fields = ("node", "pod", "node_state", "status", "reason", "started_at", "finished_at")
    readonly_fields = fields

    def get_queryset(self, request):
        first = [rollout_rules.NodeStatus.FAILED, rollout_rules.NodeStatus.UPDATING]
        shown_first = Case(*(When(status=s, then=i) for i, s in enumerate(first)), default=len(first))
        return super().get_queryset(request).select_related("node__rack__pod").order_by(shown_first, "node__name")

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="pod")
    def pod(self, row):
        return row.node.rack.pod.name

    @admin.display(description="node state")
    def node_state(self, row):
        return row.node.state


@admin.register(FirmwareRollout)
class FirmwareRolloutAdmin(ViewOnlyAdmin):
    """Rollouts and how far each has come. They start from a baseline's action (or manage.py
    roll_out_firmware) and change only through the actions: the reconciler does the rest. None is
    deleted: what it did to the nodes is history."""

    list_display = [
        "__str__",
        "status",
        "progress",
        "batch_size",
        "per_pod_cap",
        "started_by",
        "started_at",
        "paused_reason",
    ]
    list_filter = ["status", "baseline"]
    list_select_related = ["baseline"]
    fields = (
        "baseline",
        "status",
        "progress",
        "batch_size",
        "per_pod_cap",
        "started_by",
        "started_at",
        "paused_reason",
        "finished_at",
    )
    readonly_fields = fields
    inlines = [FirmwareRolloutNodeInline]
    actions = ["pause", "resume", "cancel"]

    has_pause_firmware_rollout_permission = has_permission("fleet.pause_firmware_rollout")
    has_resume_firmware_rollout_permission = has_permission("fleet.resume_firmware_rollout")
    has_cancel_firmware_rollout_permission = has_permission("fleet.cancel_firmware_rollout")

    @admin.display(description="progress")
    def progress(self, rollout):
        return rollout_progress(rollout)

    def _each(self, request, queryset, move, done: str):
        for rollout in queryset.order_by("pk"):
            try:
                moved = move(rollout)
            except firmware_rollouts.RolloutRefused as refused:
                self.message_user(request, str(refused), messages.ERROR)
            else:
                self.log_change(request, moved, done)
                self.message_user(request, f"{moved} {done}", messages.SUCCESS)

    @admin.action(description="Pause selected rollouts", permissions=["pause_firmware_rollout"])
    def pause(self, request, queryset):
        actor = f"operator:{request.user.get_username()}"
        self._each(request, queryset, lambda r: firmware_rollouts.pause(rollout_id=r.pk, actor=actor), "paused")

    @admin.action(description="Resume selected rollouts", permissions=["resume_firmware_rollout"])
    def resume(self, request, queryset):
        self._each(request, queryset, lambda r: firmware_rollouts.resume(rollout_id=r.pk), "resumed")

    @admin.action(
        description="Cancel selected rollouts (nodes inspecting finish)", permissions=["cancel_firmware_rollout"]
    )
    def cancel(self, request, queryset):
        self._each(request, queryset, lambda r: firmware_rollouts.cancel(rollout_id=r.pk), "cancelled")


@admin.register(SegmentPool)
class SegmentPoolAdmin(admin.ModelAdmin):
    """The numbers tenants' networks are given: the lowest free of a fabric's pool goes to each new
    reservation. A changed range leaves the numbers live networks hold theirs."""

    list_display = ["fabric", "scope", "kind", "first", "last"]
    list_filter = ["fabric", "kind"]


@admin.register(TenantNetwork)
class TenantNetworkAdmin(ViewOnlyAdmin):
    """Read-only: placement gives a reservation its networks, the sweep gives them back."""

    list_display = ["reservation", "fabric", "scope", "kind", "segment", "vlan", "partition", "subnet", "released_at"]
    list_filter = ["fabric", "kind", ("released_at", admin.EmptyFieldListFilter)]
    search_fields = ["reservation__id", "scope", "partition", "subnet"]
    list_select_related = ["reservation__tenant"]


@admin.register(NetworkAttachment)
class NetworkAttachmentAdmin(ViewOnlyAdmin):
    """Read-only: each node's place on each fabric, what it should be on and what was read back."""

    list_display = ["node", "fabric", "wanted", "found", "confirmed", "checked_at", "problem"]
    list_filter = ["fabric", "confirmed"]
    search_fields = ["node__name", "found", "problem"]
    list_select_related = ["node", "wanted__reservation__tenant"]
