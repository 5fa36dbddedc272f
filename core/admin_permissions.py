"""Admin actions that need a permission of their own.

Every admin action declares the permission it needs (`@admin.action(permissions=[...])`), so a
staff user who may only view never runs one. Where `change` would be too broad, the permission
is the model's own (Meta.permissions), checked by a `has_<codename>_permission` method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

if TYPE_CHECKING:
    _AnyModelAdmin = admin.ModelAdmin[Any]
else:  # Django's ModelAdmin takes no type argument at run time
    _AnyModelAdmin = admin.ModelAdmin


class ViewOnlyAdmin(_AnyModelAdmin):
    """Rows that only the control plane writes (audit history, what a sweep read, what a rollout
    did): operators read them, and act on them only through actions with permissions of their own."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


def has_permission(permission: str) -> Callable[[_AnyModelAdmin, HttpRequest], bool]:
    """The ModelAdmin method that Django's admin calls for an action's custom permission."""

    def check(modeladmin: _AnyModelAdmin, request: HttpRequest) -> bool:
        return request.user.has_perm(permission)

    return check
