"""The node lifecycle: a pure state machine, `(state, event) -> state`.

No Django import, so it can be read, tested and reused on its own. The database repeats the
invariants below as CHECK constraints (see fleet/models.py).

Main path: enrolled -> inspecting -> available -> provisioning -> active -> wiping ->
inspecting -> available. Inspection ends with attestation, so the only way into `available`
is `attestation_passed`, and the only way into `inspecting` after a tenant is
`wipe_succeeded`: no node serves a second tenant without a wipe and a passing attestation.
A quarantined node comes back only by an operator, and then only through wiping.

An available node goes back into inspection on `firmware_update`, when an operator's firmware
rollout (fleet/rollout_rules.py) takes it: it then runs the whole inspection again (firmware
check and repair, inventory, diagnostics, attestation), so it comes back available only with a
passing attestation, as every node does. It held no tenant, so no wipe comes first.
"""

from __future__ import annotations

import enum

from core.errors import Conflict


class State(enum.StrEnum):
    ENROLLED = "enrolled"
    INSPECTING = "inspecting"
    AVAILABLE = "available"
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    WIPING = "wiping"
    QUARANTINED = "quarantined"
    MAINTENANCE = "maintenance"


class Event(enum.StrEnum):
    INSPECTION_STARTED = "inspection_started"
    INSPECTION_PASSED = "inspection_passed"
    INSPECTION_FAILED = "inspection_failed"
    DIAGNOSTIC_FAILED = "diagnostic_failed"
    FIRMWARE_DRIFT = "firmware_drift"
    ATTESTATION_PASSED = "attestation_passed"
    ATTESTATION_FAILED = "attestation_failed"
    PROVISION_REQUESTED = "provision_requested"
    PROVISION_SUCCEEDED = "provision_succeeded"
    PROVISION_FAILED = "provision_failed"
    RELEASED = "released"
    WIPE_SUCCEEDED = "wipe_succeeded"
    WIPE_FAILED = "wipe_failed"
    HARDWARE_FAULT = "hardware_fault"
    OPERATOR_QUARANTINE = "operator_quarantine"
    OPERATOR_MAINTENANCE = "operator_maintenance"
    OPERATOR_RETURN = "operator_return"
    TENANT_REPORT = "tenant_report"
    REINSTALL_REQUESTED = "reinstall_requested"
    FIRMWARE_UPDATE = "firmware_update"


class TransitionRefused(Conflict):
    """The node cannot move by this event now: the state machine forbids it (IllegalTransition),
    or another writer moved the node first (fleet.services.ConcurrentTransition)."""


class IllegalTransition(TransitionRefused, ValueError):
    def __init__(self, state: State, event: Event):
        self.state = state
        self.event = event
        super().__init__(f"event {event.value!r} is not allowed in state {state.value!r}")


_NOT_QUARANTINED = frozenset(State) - {State.QUARANTINED}
# A node serves a reservation (and has its tenant) exactly in these states (a CHECK constraint too).
SERVING_STATES = frozenset({State.PROVISIONING, State.ACTIVE})

TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.ENROLLED, Event.INSPECTION_STARTED): State.INSPECTING,
    # Inventory matched; the node stays in inspecting until attestation decides.
    (State.INSPECTING, Event.INSPECTION_PASSED): State.INSPECTING,
    (State.INSPECTING, Event.INSPECTION_FAILED): State.QUARANTINED,
    # A diagnostics test failed: at inspection, or in a run on an idle node (workflows/idle_diagnostics.py)
    # whose verdict may arrive just as placement takes the node; a tenant never gets a failing GPU.
    **{
        (state, Event.DIAGNOSTIC_FAILED): State.QUARANTINED
        for state in (State.INSPECTING, State.AVAILABLE, State.PROVISIONING)
    },
    # Firmware, BIOS settings or Secure Boot off the node class's baseline, and not repaired.
    (State.INSPECTING, Event.FIRMWARE_DRIFT): State.QUARANTINED,
    (State.INSPECTING, Event.ATTESTATION_PASSED): State.AVAILABLE,
    # A firmware rollout brings an idle node to its baseline: the whole inspection again, no wipe
    # (no tenant had it since its last one). Nodes in use get the baseline at their next handoff.
    (State.AVAILABLE, Event.FIRMWARE_UPDATE): State.INSPECTING,
    (State.INSPECTING, Event.ATTESTATION_FAILED): State.QUARANTINED,
    (State.AVAILABLE, Event.PROVISION_REQUESTED): State.PROVISIONING,
    (State.PROVISIONING, Event.PROVISION_SUCCEEDED): State.ACTIVE,
    # A half-provisioned node may already hold tenant data: it is wiped, never reused as is.
    (State.PROVISIONING, Event.PROVISION_FAILED): State.WIPING,
    (State.PROVISIONING, Event.RELEASED): State.WIPING,
    (State.ACTIVE, Event.RELEASED): State.WIPING,
    (State.WIPING, Event.WIPE_SUCCEEDED): State.INSPECTING,
    (State.WIPING, Event.WIPE_FAILED): State.QUARANTINED,
    **{(state, Event.HARDWARE_FAULT): State.QUARANTINED for state in _NOT_QUARANTINED},
    **{(state, Event.OPERATOR_QUARANTINE): State.QUARANTINED for state in _NOT_QUARANTINED},
    # "This node is broken": it leaves the reservation for an operator to look at.
    **{(state, Event.TENANT_REPORT): State.QUARANTINED for state in SERVING_STATES},
    # The tenant's reinstall: provisioned again for the same reservation, its disks erased first.
    (State.ACTIVE, Event.REINSTALL_REQUESTED): State.PROVISIONING,
    (State.ENROLLED, Event.OPERATOR_MAINTENANCE): State.MAINTENANCE,
    (State.AVAILABLE, Event.OPERATOR_MAINTENANCE): State.MAINTENANCE,
    (State.QUARANTINED, Event.OPERATOR_MAINTENANCE): State.MAINTENANCE,
    (State.QUARANTINED, Event.OPERATOR_RETURN): State.WIPING,
    (State.MAINTENANCE, Event.OPERATOR_RETURN): State.WIPING,
}

# Invariants the database repeats as CHECK constraints.
# A node in these states is clean: no tenant, and no tenant's data on it.
CLEAN_STATES = frozenset({State.ENROLLED, State.INSPECTING, State.AVAILABLE})
REASON_REQUIRED = frozenset({State.QUARANTINED})
# States in which a workflow owes the node work; workers claim nodes in these.
WORK_STATES = frozenset({State.INSPECTING, State.PROVISIONING, State.WIPING})

# Held out of service by an operator or a fault: on no network of any fabric (an Ethernet port on
# no VLAN), since what runs on the node is not known to be clean.
ISOLATED_STATES = frozenset({State.QUARANTINED, State.MAINTENANCE})


def next_state(state: State | str, event: Event | str) -> State:
    """The state a node in `state` enters on `event`; IllegalTransition if it may not."""
    state, event = State(state), Event(event)
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None
