"""Operators see reservations with where they were placed, their allocations and their history.
State changes go through reservations.services (the release action), never a form field.

API keys are listed by their prefix and never shown: only their digest is kept. Operators revoke
them (one by one, or every key of a tenant) and never make one here: `create_tenant` issues an
organisation key, members make their own. An organisation's members are an inline of the tenant.
"""

import csv
from datetime import timedelta

from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpResponse

from core import clock
from core.admin_inlines import PaginatedInline
from core.admin_permissions import has_permission
from core.errors import Conflict
from reservations import access, selectors, services, usage, webhooks
from reservations.models import (
    Activity,
    Allocation,
    ApiKey,
    Membership,
    Quota,
    Reservation,
    ReservationEvent,
    SSHKey,
    Tenant,
    Webhook,
    WebhookDelivery,
)
from reservations.services import api_keys, members


class ReadOnlyInline(PaginatedInline):
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class AllocationInline(ReadOnlyInline):
    model = Allocation
    fields = ("node", "period", "ended_reason")
    readonly_fields = fields


class ReservationEventInline(ReadOnlyInline):
    model = ReservationEvent
    fields = ("at", "event", "actor", "user", "key", "detail")
    readonly_fields = fields
    ordering = ["-at", "-id"]  # the newest page first


class ActivityInline(ReadOnlyInline):
    """Who changed the organisation's keys, members, webhooks and SSH keys."""

    model = Activity
    fields = ("at", "event", "user", "key", "detail")
    readonly_fields = fields
    ordering = ["-at", "-id"]


class SSHKeyInline(ReadOnlyInline):
    model = SSHKey
    fields = ("name", "fingerprint", "created_at")
    readonly_fields = fields


class QuotaInline(admin.StackedInline):
    """The tenant's limits; an empty one is the fleet's default (GPUFLEET_*), or none."""

    model = Quota
    can_delete = True
    extra = 0
    max_num = 1


class MembershipInline(admin.TabularInline):
    """The organisation's members and their roles: an operator adds its first admin here. Saved
    through reservations.services.members (TenantAdmin.save_formset): the organisation's activity
    names the operator, and it keeps an admin."""

    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at", "signed_out_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "tenant", "scope", "organisation_key", "created_by", "created_at", "last_used_at"]
    list_display += ["expires_at", "revoked_at"]
    list_filter = ["scope", "organisation_key"]
    search_fields = ["prefix", "name", "tenant__name"]
    list_select_related = ["tenant", "created_by"]
    exclude = ["digest"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke the selected keys", permissions=["delete"])
    def revoke(self, request, queryset):
        revoked = api_keys.revoke_keys(queryset)
        self.message_user(request, f"Revoked {revoked} API key(s)", messages.SUCCESS)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "created_at"]
    search_fields = ["name"]
    readonly_fields = ["created_at"]
    inlines = [MembershipInline, QuotaInline, SSHKeyInline, ActivityInline]
    actions = ["revoke_api_tokens", "export_usage_csv"]

    has_revoke_tenant_tokens_permission = has_permission("reservations.revoke_tenant_tokens")

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        tenant = form.instance
        formset.save(commit=False)  # sorts the rows into new, changed and deleted ones
        try:
            with transaction.atomic():
                for member in formset.new_objects:
                    members.add_member(tenant=tenant, user=member.user, role=access.Role(member.role))
                for member, changed in formset.changed_objects:
                    if "user" in changed:  # another person in the row: they join, the one before leaves
                        members.add_member(tenant=tenant, user=member.user, role=access.Role(member.role))
                        members.remove_member(tenant=tenant, membership_id=member.pk)
                    else:
                        members.change_role(tenant=tenant, membership_id=member.pk, role=access.Role(member.role))
                for member in formset.deleted_objects:
                    members.remove_member(tenant=tenant, membership_id=member.pk)
        except Conflict as refused:
            self.message_user(request, f"Members not changed: {refused}", messages.ERROR)

    @admin.action(
        description="Revoke every API key of selected tenants (manage.py create_tenant issues a new one)",
        permissions=["revoke_tenant_tokens"],
    )
    def revoke_api_tokens(self, request, queryset):
        revoked = api_keys.revoke_all_keys(queryset)
        self.message_user(request, f"Revoked {revoked} API key(s)", messages.SUCCESS)

    has_export_usage_permission = has_permission("reservations.export_usage")

    @admin.action(
        description="Download the usage of selected tenants, last month and this month so far (CSV)",
        permissions=["export_usage"],
    )
    def export_usage_csv(self, request, queryset):
        now = clock.now()
        this_month = usage.calendar_month(now)
        window = usage.Span(usage.calendar_month(this_month.start - timedelta(days=1)).start, now)
        answer = HttpResponse(content_type="text/csv")
        answer["Content-Disposition"] = f'attachment; filename="usage-{now:%Y-%m-%d}.csv"'
        rows = csv.writer(answer)
        rows.writerow(["tenant", "month", "reservation", *usage.KINDS])
        for tenant in queryset.order_by("name"):
            for month in usage.months(window):
                figures = selectors.usage_of(tenant, month.start, month.end, now=now)
                for row in figures["results"]:
                    rows.writerow([tenant.name, f"{month.start:%Y-%m}", row["reservation"], *map(row.get, usage.KINDS)])
                rows.writerow([tenant.name, f"{month.start:%Y-%m}", "total", *map(figures["total"].get, usage.KINDS)])
        return answer


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = ["id", "tenant", "state", "node_count", "pod", "rack_scale", "starts_at", "ends_at", "reason"]
    list_filter = ["state", "pod", "rack_scale", "tenant"]
    list_select_related = ["tenant", "pod"]
    search_fields = ["tenant__name", "placement", "allocations__node__name"]
    fields = ("tenant", "state", "node_count", "pod", "rack_scale", "starts_at", "ends_at", "reason", "placement")
    readonly_fields = fields
    inlines = [AllocationInline, ReservationEventInline]
    actions = ["release"]

    has_release_reservation_permission = has_permission("reservations.release_reservation")

    def has_add_permission(self, request):
        return False  # tenants reserve through the API, where placement runs

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(
        description="Release selected reservations (their nodes go to wiping)", permissions=["release_reservation"]
    )
    def release(self, request, queryset):
        for reservation in queryset.order_by("pk"):
            services.release_reservation(
                reservation_id=reservation.pk,
                actor=f"operator:{request.user.get_username()}",
                reason="released by an operator",
            )
        self.message_user(request, f"Released {queryset.count()} reservation(s)", messages.SUCCESS)


class WebhookDeliveryInline(ReadOnlyInline):
    model = WebhookDelivery
    fields = ("created_at", "event", "state", "attempts", "last_status", "last_error", "next_attempt_at")
    readonly_fields = fields
    ordering = ["-created_at"]


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    """Tenants' webhooks and what was sent to them; the secret is the tenant's and never shown."""

    list_display = ["tenant", "url", "events", "created_at"]
    list_filter = ["tenant"]
    fields = ("tenant", "url", "events", "created_at")
    readonly_fields = fields
    inlines = [WebhookDeliveryInline]

    def has_add_permission(self, request):
        return False  # the tenant's own: POST /v1/webhooks

    # Through the service, one by one: the organisation's activity names the operator who deleted it.
    def delete_model(self, request, obj):
        webhooks.delete_webhook(tenant=obj.tenant, webhook_id=obj.pk)

    def delete_queryset(self, request, queryset):
        for webhook in queryset.select_related("tenant"):
            self.delete_model(request, webhook)
