"""Admin actions that need a permission of their own.

Every admin action declares the permission it needs (`@admin.action(permissions=[...])`), so a
staff user who may only view never runs one. Where `change` would be too broad, the permission
is the model's own (Meta.permissions), checked by a `has_<codename>_permission` method.
"""

from django.contrib import admin


class ViewOnlyAdmin(admin.ModelAdmin):
    """Rows that only the control plane writes (audit history, what a sweep read, what a rollout
    did): operators read them, and act on them only through actions with permissions of their own."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def has_permission(permission: str):
    """The ModelAdmin method that Django's admin calls for an action's custom permission."""

    def check(modeladmin, request) -> bool:
        return request.user.has_perm(permission)

    return check
