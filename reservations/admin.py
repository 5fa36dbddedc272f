from django.contrib import admin

from reservations.models import Reservation, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    list_display = ["id", "tenant", "state", "node_count", "pod", "rack_scale", "starts_at", "ends_at"]
    list_filter = ["state", "pod", "rack_scale"]
    list_select_related = ["tenant", "pod"]
    readonly_fields = ["state", "reason"]  # changed by the reservation services only
