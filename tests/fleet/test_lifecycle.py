"""The pure state machine: every legal transition, and every other pair refused."""

import itertools
import os
import subprocess
import sys

import pytest

from fleet.lifecycle import (
    CLEAN_STATES,
    REASON_REQUIRED,
    SERVING_STATES,
    TRANSITIONS,
    Event,
    IllegalTransition,
    State,
    next_state,
)
from tests.support import REPO_ROOT

EXPECTED: dict[tuple[State, Event], State] = {
    (State.ENROLLED, Event.INSPECTION_STARTED): State.INSPECTING,
    (State.INSPECTING, Event.INSPECTION_PASSED): State.INSPECTING,
    (State.INSPECTING, Event.INSPECTION_FAILED): State.QUARANTINED,
    (State.INSPECTING, Event.DIAGNOSTIC_FAILED): State.QUARANTINED,
    (State.AVAILABLE, Event.DIAGNOSTIC_FAILED): State.QUARANTINED,
    (State.PROVISIONING, Event.DIAGNOSTIC_FAILED): State.QUARANTINED,
    (State.INSPECTING, Event.FIRMWARE_DRIFT): State.QUARANTINED,
    (State.INSPECTING, Event.ATTESTATION_PASSED): State.AVAILABLE,
    (State.AVAILABLE, Event.FIRMWARE_UPDATE): State.INSPECTING,
    (State.INSPECTING, Event.ATTESTATION_FAILED): State.QUARANTINED,
    (State.AVAILABLE, Event.PROVISION_REQUESTED): State.PROVISIONING,
    (State.PROVISIONING, Event.PROVISION_SUCCEEDED): State.ACTIVE,
    (State.PROVISIONING, Event.PROVISION_FAILED): State.WIPING,
    (State.PROVISIONING, Event.RELEASED): State.WIPING,
    (State.ACTIVE, Event.RELEASED): State.WIPING,
    (State.WIPING, Event.WIPE_SUCCEEDED): State.INSPECTING,
    (State.WIPING, Event.WIPE_FAILED): State.QUARANTINED,
    (State.ENROLLED, Event.OPERATOR_MAINTENANCE): State.MAINTENANCE,
    (State.AVAILABLE, Event.OPERATOR_MAINTENANCE): State.MAINTENANCE,
    (State.QUARANTINED, Event.OPERATOR_MAINTENANCE): State.MAINTENANCE,
    (State.QUARANTINED, Event.OPERATOR_RETURN): State.WIPING,
    (State.MAINTENANCE, Event.OPERATOR_RETURN): State.WIPING,
    **{(s, Event.HARDWARE_FAULT): State.QUARANTINED for s in State if s is not State.QUARANTINED},
    **{(s, Event.OPERATOR_QUARANTINE): State.QUARANTINED for s in State if s is not State.QUARANTINED},
    (State.PROVISIONING, Event.TENANT_REPORT): State.QUARANTINED,
    (State.ACTIVE, Event.TENANT_REPORT): State.QUARANTINED,
    (State.ACTIVE, Event.REINSTALL_REQUESTED): State.PROVISIONING,
}


@pytest.mark.parametrize(("state", "event"), sorted(EXPECTED))
def test_legal_transition(state, event):
    assert next_state(state, event) is EXPECTED[(state, event)]


ILLEGAL = sorted(set(itertools.product(State, Event)) - set(EXPECTED))


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_every_other_pair_is_refused_naming_state_and_event(state, event):
    with pytest.raises(IllegalTransition) as refused:
        next_state(state, event)
    assert refused.value.state is state and refused.value.event is event
    assert repr(state.value) in str(refused.value) and repr(event.value) in str(refused.value)


def test_table_is_exactly_the_expected_one():
    assert TRANSITIONS == EXPECTED
    assert len(ILLEGAL) + len(EXPECTED) == len(State) * len(Event)


def test_strings_are_accepted_like_members():
    assert next_state("active", "released") is State.WIPING


def test_unknown_names_are_refused():
    with pytest.raises(ValueError):
        next_state("on_fire", "released")
    with pytest.raises(ValueError):
        next_state("active", "explode")


def test_available_is_reached_only_by_attestation_passed():
    assert {event for (_, event), new in TRANSITIONS.items() if new is State.AVAILABLE} == {Event.ATTESTATION_PASSED}


def test_after_a_tenant_inspection_is_reached_only_through_a_successful_wipe():
    into_inspecting = {
        (old, event) for (old, event), new in TRANSITIONS.items() if new is State.INSPECTING and old != new
    }
    # A firmware rollout inspects an available node again: available is clean, reached only by attestation.
    assert into_inspecting == {
        (State.ENROLLED, Event.INSPECTION_STARTED),
        (State.WIPING, Event.WIPE_SUCCEEDED),
        (State.AVAILABLE, Event.FIRMWARE_UPDATE),
    }
    assert State.AVAILABLE in CLEAN_STATES


def test_no_path_from_a_tenant_to_available_skips_wipe_and_attestation():
    # Search every path leaving `active`: each one reaching `available` passes wipe_succeeded
    # and then attestation_passed.
    frontier: list[tuple[State, tuple[Event, ...]]] = [(State.ACTIVE, ())]
    seen = set()
    while frontier:
        state, events = frontier.pop()
        for event in (event for (from_state, event) in TRANSITIONS if from_state is state):
            new = next_state(state, event)
            path = (*events, event)
            if new is State.AVAILABLE:
                assert Event.WIPE_SUCCEEDED in path
                assert path.index(Event.ATTESTATION_PASSED) > path.index(Event.WIPE_SUCCEEDED)
            elif (new, event) not in seen:
                seen.add((new, event))
                frontier.append((new, path))


def test_quarantine_is_left_only_by_an_operator_and_only_towards_wiping_or_maintenance():
    leaving = {(event, new) for (old, event), new in TRANSITIONS.items() if old is State.QUARANTINED}
    assert leaving == {(Event.OPERATOR_RETURN, State.WIPING), (Event.OPERATOR_MAINTENANCE, State.MAINTENANCE)}
    assert {new for (old, _), new in TRANSITIONS.items() if old is State.MAINTENANCE} <= {
        State.WIPING,
        State.QUARANTINED,
    }


def test_invariant_sets_do_not_contradict():
    assert not SERVING_STATES & CLEAN_STATES
    assert {State.QUARANTINED} == REASON_REQUIRED


def test_lifecycle_imports_without_django():
    # A fresh interpreter in which importing django fails outright.
    code = "import sys; sys.modules['django'] = None; import fleet.lifecycle, core.topology, fleet.inventory"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert result.returncode == 0, result.stderr
