"""Operators see reservations with where they were placed, their allocations and their history.
State changes go through reservations.services (the release action), never a form field."""

from django.contrib import admin, messages

from reservations import services
from reservations.models import Allocation, Reservation, ReservationEvent, Tenant


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class AllocationInline(ReadOnlyInline):
    model = Allocation
    fields = ["node", "period", "ended_reason"]
    readonly_fields = fields


class ReservationEventInline(ReadOnlyInline):
    model = ReservationEvent
    fields = ["at", "event", "actor", "detail"]
    readonly_fields = fields


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "created_at"]
    search_fields = ["name"]
    readonly_fields = ["created_at"]


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = ["id", "tenant", "state", "node_count", "pod", "rack_scale", "starts_at", "ends_at", "reason"]
    list_filter = ["state", "pod", "rack_scale", "tenant"]
    list_select_related = ["tenant", "pod"]
    search_fields = ["tenant__name", "placement", "allocations__node__name"]
    fields = ["tenant", "state", "node_count", "pod", "rack_scale", "starts_at", "ends_at", "reason", "placement"]
    readonly_fields = fields
    inlines = [AllocationInline, ReservationEventInline]
    actions = ["release"]

    def has_add_permission(self, request):
        return False  # tenants reserve through the API, where placement runs

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Release selected reservations (their nodes go to wiping)")
    def release(self, request, queryset):
        for reservation in queryset.order_by("pk"):
            services.release_reservation(
                reservation_id=reservation.pk,
                actor=f"operator:{request.user.get_username()}",
                reason="released by an operator",
            )
        self.message_user(request, f"Released {queryset.count()} reservation(s)", messages.SUCCESS)
