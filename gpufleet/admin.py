"""What every app's admin shares: an action's own permission, and the login throttle's records.

Every admin action declares the permission it needs (`@admin.action(permissions=[...])`), so a
staff user who may only view never runs one. Where `change` would be too broad, the permission
is the model's own (Meta.permissions), checked by a `has_<codename>_permission` method.
"""

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin


def has_permission(permission: str):
    """The ModelAdmin method that Django's admin calls for an action's custom permission."""

    def check(modeladmin, request) -> bool:
        return request.user.has_perm(permission)

    return check


admin.site.unregister(AccessAttempt)


@admin.register(AccessAttempt)
class LoginAttemptAdmin(AccessAttemptAdmin):
    """django-axes' own, with its clean-up action behind the permission to delete attempts."""

    @admin.action(description="Clean up expired attempts", permissions=["delete"])
    def cleanup_expired_attempts(self, request, queryset):
        # axes (8.3.1) measures the cool-off from a login request's attempt time, which an
        # admin request lacks (AttributeError, a 500); None means "from now".
        request.axes_attempt_time = None
        super().cleanup_expired_attempts(request, queryset)
