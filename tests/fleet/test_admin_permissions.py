"""Every admin action needs its own permission: a staff user who may only view runs none of them.

The actions are read from the admin site's registry, so an action added later is covered
without touching this file, except to say (in SCENARIOS) what rows it acts on.
"""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_permission_codename, get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.models import Session
from django.db.models import Model
from django.test import RequestFactory
from django.utils import timezone

from attestation.models import GpuRim, ReferenceValue
from fleet import firmware_rollouts
from fleet.models import FirmwareBaseline
from remediation.models import Remediation, RemediationStatus
from reservations.models import ApiKey, Reservation, Tenant
from tests.support.factories import drive, enrol_default_fleet, tenant_token

DJANGO_PERMISSIONS = {"add", "change", "delete", "view"}


def registered_actions() -> list[tuple[type[Model], str, object]]:
    """(model, action name, action) for every action of every registered ModelAdmin."""
    superuser = get_user_model()(is_superuser=True, is_active=True, is_staff=True)
    request = RequestFactory().get("/admin/")
    request.user = superuser
    found: list[tuple[type[Model], str, object]] = []
    for model, modeladmin in admin.site._registry.items():
        for name, action in modeladmin.get_actions(request).items():
            assert action is not None, f"{model._meta.label}.{name} lists no action"
            found.append((model, name, action[0]))
    return found


# Django's own delete_selected checks `delete` itself (and Django tests it); every other action is ours to check.
OWN_ACTIONS = [(model, name, function) for model, name, function in registered_actions() if name != "delete_selected"]


def an_enrolled_node():
    return enrol_default_fleet(1), {}


def a_node_and_a_reason():
    return enrol_default_fleet(1), {"apply": "Quarantine", "reason": "smoke from the PSU"}


def a_quarantined_node():
    (node,) = enrol_default_fleet(1)
    return [drive(node, "operator_quarantine")], {}


def a_baseline_and_a_batch():
    enrol_default_fleet(1)
    return [FirmwareBaseline.objects.create(name="default")], {"apply": "Roll out", "batch_size": 4, "per_pod_cap": 1}


def a_running_rollout():
    enrol_default_fleet(1)  # inspected later: the rollout waits for it
    baseline = FirmwareBaseline.objects.create(name="default")
    return [firmware_rollouts.start_rollout(baseline=baseline, batch_size=4, per_pod_cap=1, actor="test")], {}


def a_paused_rollout():
    (rollout,), extra = a_running_rollout()
    return [firmware_rollouts.pause(rollout_id=rollout.pk, actor="test")], extra


def a_reservation():
    return [Reservation.objects.create(tenant=Tenant.objects.create(name="alice"), node_count=1)], {}


def a_tenant_with_a_token():
    tenant_token("carol")
    return [Tenant.objects.get(name="carol")], {}


def an_api_key():
    tenant_token("carol")
    return [ApiKey.objects.get(tenant__name="carol")], {}


def a_suppressed_remediation():
    (node,) = enrol_default_fleet(1)
    remediation = Remediation.objects.create(
        fingerprint="f" * 16,
        starts_at="2026-11-29T17:00:00Z",
        alert="GPUFatalXid",
        alert_status="firing",
        node=node,
        gpu=3,
        action="quarantine",
        reason="XID 79 over the cap",
        status=RemediationStatus.SUPPRESSED,
    )
    return [remediation], {}


def an_expired_login_attempt():
    attempt = AccessAttempt.objects.create(
        username="mallory",
        ip_address="10.0.0.9",
        user_agent="",
        http_accept="",
        path_info="/admin/login/",
        failures_since_start=1,
    )
    AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time=timezone.now() - timedelta(days=2))
    return [attempt], {}


def a_reference_value(**fields):
    return [
        ReferenceValue.objects.create(
            release="vmlinuz-6.8.0-49-generic", component="kernel", digest="ab" * 32, **fields
        )
    ], {}


def a_retired_reference_value():
    return a_reference_value(retired_at=timezone.now())


def a_gpu_rim(**fields):
    now = timezone.now()
    rim = GpuRim.objects.create(
        rim_id="NV_GPU_DRIVER_GH100_550.144.03",
        component="driver",
        version="550.144.03",
        chip="GH100",
        tag_id="t",
        valid_from=now,
        valid_until=now + timedelta(days=365),
        golden={},
        xml="<x/>",
        sha384="ab" * 48,
        **fields,
    )
    return [rim], {}


def a_retired_gpu_rim():
    return a_gpu_rim(retired_at=timezone.now())


# What each action acts on: the rows to select and whatever else its form posts.
SCENARIOS = {
    ("attestation.ReferenceValue", "retire"): a_reference_value,
    ("attestation.ReferenceValue", "return_to_service"): a_retired_reference_value,
    ("attestation.GpuRim", "retire"): a_gpu_rim,
    ("attestation.GpuRim", "return_to_service"): a_retired_gpu_rim,
    ("fleet.Node", "quarantine"): a_node_and_a_reason,
    ("fleet.Node", "return_to_service"): a_quarantined_node,
    ("fleet.Node", "put_into_maintenance"): an_enrolled_node,
    ("fleet.FirmwareBaseline", "roll_out"): a_baseline_and_a_batch,
    ("fleet.FirmwareRollout", "pause"): a_running_rollout,
    ("fleet.FirmwareRollout", "resume"): a_paused_rollout,
    ("fleet.FirmwareRollout", "cancel"): a_running_rollout,
    ("reservations.Reservation", "release"): a_reservation,
    ("reservations.Tenant", "revoke_api_tokens"): a_tenant_with_a_token,
    ("reservations.ApiKey", "revoke"): an_api_key,
    ("reservations.Tenant", "export_usage_csv"): a_tenant_with_a_token,
    ("remediation.Remediation", "apply_suppressed"): a_suppressed_remediation,
    ("axes.AccessAttempt", "cleanup_expired_attempts"): an_expired_login_attempt,
}


# Actions that read, not write: running one answers a file instead of changing a row.
DOWNLOADS = {"reservations.Tenant.export_usage_csv"}


def database() -> dict:
    """Every row of every model but the sessions (a request may touch its own)."""
    return {
        model._meta.label: list(model._base_manager.order_by("pk").values())
        for model in apps.get_models()
        if model is not Session
    }


def staff_user(name: str, *permissions: Permission):
    user = get_user_model().objects.create_user(name, password=f"{name}-password-1", is_staff=True)
    user.user_permissions.set(permissions)
    return user


def view_permission(model) -> Permission:
    return Permission.objects.get(
        content_type=ContentType.objects.get_for_model(model), codename=get_permission_codename("view", model._meta)
    )


def action_permissions(model, function) -> list[Permission]:
    """The permissions an action declares; a custom one is its app's Meta permission of that codename
    (`has_perm("app.codename")`), the model's own or another's: starting a rollout is a baseline's action."""
    content_type = ContentType.objects.get_for_model(model)
    return [
        Permission.objects.get(content_type=content_type, codename=get_permission_codename(name, model._meta))
        if name in DJANGO_PERMISSIONS
        else Permission.objects.get(content_type__app_label=model._meta.app_label, codename=name)
        for name in function.allowed_permissions
    ]


def run_action(client, model, name):
    rows, extra = SCENARIOS[(model._meta.label, name)]()
    before = database()
    answer = client.post(
        f"/admin/{model._meta.app_label}/{model._meta.model_name}/",
        {"action": name, ACTION_CHECKBOX_NAME: [row.pk for row in rows], **extra},
    )
    assert answer.status_code in (200, 302)
    return before, database(), answer.get("Content-Disposition", "").startswith("attachment")


def action_id(entry) -> str:
    model, name, _ = entry
    return f"{model._meta.label}.{name}"


def test_every_admin_action_declares_the_permission_it_needs():
    assert OWN_ACTIONS, "the registry lists no action: the walk is broken"
    for model, name, function in OWN_ACTIONS:
        assert getattr(function, "allowed_permissions", None), f"{model._meta.label}.{name} declares no permission"


def test_every_admin_action_has_a_scenario_here():
    missing = {action_id(entry) for entry in OWN_ACTIONS} - {f"{label}.{name}" for label, name in SCENARIOS}
    assert not missing, f"add to SCENARIOS what these actions act on: {sorted(missing)}"


@pytest.mark.django_db
@pytest.mark.parametrize("entry", OWN_ACTIONS, ids=action_id)
def test_a_view_only_operator_cannot_run_the_action(client, entry):
    model, name, _ = entry
    client.force_login(staff_user("viewer", *(view_permission(m) for m in admin.site._registry)))
    before, after, downloaded = run_action(client, model, name)
    assert after == before and not downloaded, f"{action_id(entry)} ran for a user who may only view"


@pytest.mark.django_db
@pytest.mark.parametrize("entry", OWN_ACTIONS, ids=action_id)
def test_an_operator_with_exactly_the_actions_permission_can_run_it(client, entry):
    model, name, function = entry
    client.force_login(staff_user("operator", view_permission(model), *action_permissions(model, function)))
    before, after, downloaded = run_action(client, model, name)
    did = downloaded if action_id(entry) in DOWNLOADS else after != before
    assert did, f"{action_id(entry)} did nothing for a user holding its permission"
