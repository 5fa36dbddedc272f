"""Reads of the fleet."""

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

from django.conf import settings
from django.db.models import Exists, F, JSONField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Now

from core.topology import NVLINK_DOMAIN, POD
from fleet import agent_credentials, diagnostics, fabric, fabric_health, firmware, lifecycle, rollout_rules
from fleet.models import (
    GPU,
    SWITCH_IN_TROUBLE,
    AuditEvent,
    AuditOnlyEvent,
    ConfigDrive,
    CredentialHolder,
    FabricDomain,
    FabricLevel,
    FabricSwitch,
    FirmwareBaseline,
    FirmwareRollout,
    FirmwareRolloutNode,
    IdleDiagnosticRun,
    IdleDiagnosticStatus,
    Node,
    NodeCredential,
    Rack,
)
from fleet.rollout_rules import NodeStatus

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


def _unleased_owing_work() -> QuerySet[Node]:
    unleased = Q(lease_owner="") | Q(lease_expires_at__lte=Now())
    return Node.objects.filter(unleased, state__in=sorted(s.value for s in lifecycle.WORK_STATES))


def nodes_owing_work(*, limit: int, quiet_for: timedelta) -> list[int]:
    """Nodes in a state that owes a workflow, with no live lease, and untouched for `quiet_for`:
    longest waiting first. A node that just moved was enqueued on commit; it needs no second message."""
    quiet = Q(state_since__lte=Now() - quiet_for) & (Q(step_since__isnull=True) | Q(step_since__lte=Now() - quiet_for))
    return list(_unleased_owing_work().filter(quiet).order_by("state_since", "pk").values_list("pk", flat=True)[:limit])


def unleased_nodes_owing_work(node_ids: Iterable[int]) -> list[int]:
    """Those of `node_ids` that owe a workflow and that no live lease holds."""
    return list(_unleased_owing_work().filter(pk__in=list(node_ids)).order_by("pk").values_list("pk", flat=True))


def config_drive_token(*, node_id: int) -> str:
    """The token of the URL the node's BMC fetches its tenancy's config drive from."""
    live = ConfigDrive.objects.filter(credential__holder=CredentialHolder.TENANCY, credential__revoked_at=None)
    return live.values_list("token", flat=True).get(node_id=node_id)


def agent_token(*, node_id: int) -> str:
    """What the control plane presents to the node's agent: the agent token of the credential of
    what the node runs now, its service boot's if the service image runs, else its tenancy's;
    "" if it has none (the agent then answers 401)."""
    live = NodeCredential.objects.filter(node_id=node_id, revoked_at=None)
    nonces = dict(live.values_list("holder", "nonce"))
    nonce = nonces.get(CredentialHolder.BOOT) or nonces.get(CredentialHolder.TENANCY)
    if nonce is None:
        return ""
    return agent_credentials.agent_secrets(settings.SECRET_KEY, node_id=node_id, nonce=nonce).agent_token


def tenancy_began(*, node_id: int) -> datetime:
    """When the node began serving its current tenant: its last provisioning request (a reinstall
    stays in the same tenancy). Read for a node that serves a reservation, which always has one."""
    return (
        AuditEvent.objects.filter(node_id=node_id, event=lifecycle.Event.PROVISION_REQUESTED)
        .order_by("-at", "-id")
        .values_list("at", flat=True)[:1]
        .get()
    )


def recently_passed_long_diagnostics() -> QuerySet[Node]:
    """Nodes whose last passed diagnostics run was a long one, within DIAGNOSTICS_RECENT_DAYS: what
    placement prefers, and what idle diagnostics leave alone. A short pass since (the inspection
    after a tenant) replaces it: the long run says nothing of what the tenant did to the node."""
    recent = Now() - timedelta(days=settings.DIAGNOSTICS_RECENT_DAYS)
    return Node.objects.filter(diagnostic_level__gte=diagnostics.LONG, diagnostic_passed_at__gte=recent)


def due_for_idle_diagnostics(*, limit: int) -> list[int]:
    """Available nodes without a recent long pass, with no idle run under way nor one ended within
    IDLE_DIAGNOSTICS_RETRY_SECONDS (a node that could not finish one is not asked again at once):
    the longest untested first."""
    retry = timedelta(seconds=settings.IDLE_DIAGNOSTICS_RETRY_SECONDS)
    recent_runs = IdleDiagnosticRun.objects.filter(node=OuterRef("pk")).filter(
        Q(status=IdleDiagnosticStatus.RUNNING) | Q(ended_at__gt=Now() - retry)
    )
    due = (
        Node.objects.filter(state=lifecycle.State.AVAILABLE)
        .exclude(pk__in=recently_passed_long_diagnostics().values("pk"))
        .exclude(Exists(recent_runs))
        .order_by(F("diagnostic_passed_at").asc(nulls_first=True), "pk")
    )
    return list(due.values_list("pk", flat=True)[:limit])


def running_idle_diagnostics(*, node_id: int) -> IdleDiagnosticRun | None:
    return IdleDiagnosticRun.objects.filter(node_id=node_id, status=IdleDiagnosticStatus.RUNNING).first()


def firmware_baseline_for(*, node_id: int) -> firmware.Baseline | None:
    """The baseline of the node's class (its GPU model), else the default one (no GPU model), else none."""
    models = GPU.objects.filter(node_id=node_id).values("model")
    baseline = (
        FirmwareBaseline.objects.filter(Q(gpu_model__in=models) | Q(gpu_model=""))
        .order_by("-gpu_model")
        .prefetch_related("components")
        .first()
    )
    return baseline.as_baseline() if baseline is not None else None


def firmware_checked_in_this_state(node: Node) -> dict | None:
    """What the node's firmware check of its current inspection read and repaired (its
    `firmware_checked` audit row), or None if there was none."""
    return (
        AuditEvent.objects.filter(node_id=node.pk, event=AuditOnlyEvent.FIRMWARE_CHECKED, at__gte=node.state_since)
        .order_by("-id")
        .values_list("detail", flat=True)
        .first()
    )


def nodes_of_baseline(baseline: FirmwareBaseline) -> QuerySet[Node]:
    """The nodes whose baseline it is, by firmware_baseline_for's rule (their GPU model's baseline,
    else the default one), for the whole fleet in one query."""
    gpu_models = GPU.objects.filter(node_id=OuterRef(OuterRef("pk"))).values("model")
    theirs = (
        FirmwareBaseline.objects.filter(Q(gpu_model__in=gpu_models) | Q(gpu_model=""))
        .order_by("-gpu_model")
        .values("pk")[:1]
    )
    return Node.objects.annotate(firmware_baseline=Subquery(theirs)).filter(firmware_baseline=baseline.pk)


class LastCheck(TypedDict):
    """What rollout_nodes annotates each row with."""

    last_check: dict[str, Any] | None


CheckedRolloutNode: TypeAlias = "WithAnnotations[FirmwareRolloutNode, LastCheck]"


def rollout_nodes(rollout: FirmwareRollout) -> QuerySet[CheckedRolloutNode]:
    """The rollout's nodes, with their node and pod, and the facts of the last firmware check against
    the baseline since it last changed (`last_check`, None if there was none): a check is recorded
    (firmware_checked) only when it found no drift from the whole baseline."""
    baseline = rollout.baseline
    checks = AuditEvent.objects.filter(
        node=OuterRef("node"),
        event=AuditOnlyEvent.FIRMWARE_CHECKED,
        at__gte=baseline.updated_at,
        detail__baseline=baseline.name,
    ).order_by("-id")
    last_check = Subquery(checks.values("detail")[:1], output_field=JSONField())
    return rollout.nodes.select_related("node__rack__pod").annotate(last_check=last_check).order_by("node__name")


def rollout_progress(rollout: FirmwareRollout) -> str:
    """How many of the rollout's nodes stand where, in one line."""
    counts = Counter(rollout.nodes.values_list("status", flat=True))
    return rollout_rules.describe({NodeStatus(status): n for status, n in counts.items()})


def fabric_levels() -> tuple[str, ...]:
    """The fleet's levels, top down: the pod, the switch levels enrolment drew, the rack (NVLink domain)."""
    return (POD, *FabricLevel.objects.order_by("depth").values_list("name", flat=True), NVLINK_DOMAIN)


def gpu_models() -> list[str]:
    """The GPU models the fleet has, by name."""
    return list(GPU.objects.order_by("model").distinct("model").values_list("model", flat=True))


def rack_fabric_paths() -> dict[str, fabric.Path]:
    """Each rack's domains at the fabric's levels between its pod and itself, top down (fleet/fabric.py)."""
    domains = {
        pk: (level, name, parent)
        for pk, level, name, parent in FabricDomain.objects.values_list("pk", "level__name", "name", "parent_id")
    }

    def path(domain_id: int | None) -> fabric.Path:
        steps = []
        while domain_id is not None:
            level, name, domain_id = domains[domain_id]
            steps.append((level, name))
        return tuple(reversed(steps))

    return {name: path(domain_id) for name, domain_id in Rack.objects.values_list("name", "fabric_domain_id")}


def troubled_switch_source() -> QuerySet:
    """A one-column query of a switch in trouble (SWITCH_IN_TROUBLE), none while every switch is
    well: what placement asks beside the holds, in the same round trip, before nodes_cut_off_in."""
    return FabricSwitch.objects.filter(SWITCH_IN_TROUBLE).order_by().values_list("id")[:1]


def nodes_cut_off_in(racks: Iterable[fabric_health.RackNodes], *, lasting: timedelta = timedelta(0)) -> dict[int, str]:
    """The nodes of `racks` that an unhealthy switch cuts off from the fabric, each with why
    (fleet/fabric_health.py), from the switches as last read: one query, as it runs on every placement.
    With `lasting`, only trouble that has lasted that long counts.

    Placement passes its cached topology's racks (reservations.selectors.nodes_cut_off); whatever
    follows the fabric's health (degrading the reservations on such nodes) reads the same."""
    # Most of the time no switch is down and no port either: one small query says so.
    if not FabricSwitch.objects.filter(SWITCH_IN_TROUBLE).exists():
        return {}
    rows = FabricSwitch.objects.order_by().values_list(
        "name",
        "kind",
        "pod__name",
        "fabric_domain__level__name",
        "fabric_domain__name",
        "health",
        "state",
        "links_down",
        "troubled_since",
        Now(),  # the database's clock (core.clock), which stamped troubled_since, in the same statement
    )
    readings = [
        fabric_health.SwitchReading(
            name=name,
            kind=kind,
            serves=(POD, pod) if pod is not None else (level, domain),
            health=health,
            state=state,
            links_down=frozenset(links_down),
            troubled_since=since,
        ).as_of(now, lasting)
        for name, kind, pod, level, domain, health, state, links_down, since, now in rows
    ]
    return fabric_health.cut_off(readings, racks)
