"""The login throttle's records in the admin (each app registers its own models; an action's own
permission is checked by core.admin_permissions)."""

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin

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
