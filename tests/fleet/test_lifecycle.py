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

S, E = State, Event

EXPECTED = {
    (S.ENROLLED, E.INSPECTION_STARTED): S.INSPECTING,
    (S.INSPECTING, E.INSPECTION_PASSED): S.INSPECTING,
    (S.INSPECTING, E.INSPECTION_FAILED): S.QUARANTINED,
    (S.INSPECTING, E.DIAGNOSTIC_FAILED): S.QUARANTINED,
    (S.AVAILABLE, E.DIAGNOSTIC_FAILED): S.QUARANTINED,
    (S.PROVISIONING, E.DIAGNOSTIC_FAILED): S.QUARANTINED,
    (S.INSPECTING, E.FIRMWARE_DRIFT): S.QUARANTINED,
    (S.INSPECTING, E.ATTESTATION_PASSED): S.AVAILABLE,
    (S.AVAILABLE, E.FIRMWARE_UPDATE): S.INSPECTING,
    (S.INSPECTING, E.ATTESTATION_FAILED): S.QUARANTINED,
    (S.AVAILABLE, E.PROVISION_REQUESTED): S.PROVISIONING,
    (S.PROVISIONING, E.PROVISION_SUCCEEDED): S.ACTIVE,
    (S.PROVISIONING, E.PROVISION_FAILED): S.WIPING,
    (S.PROVISIONING, E.RELEASED): S.WIPING,
    (S.ACTIVE, E.RELEASED): S.WIPING,
    (S.WIPING, E.WIPE_SUCCEEDED): S.INSPECTING,
    (S.WIPING, E.WIPE_FAILED): S.QUARANTINED,
    (S.ENROLLED, E.OPERATOR_MAINTENANCE): S.MAINTENANCE,
    (S.AVAILABLE, E.OPERATOR_MAINTENANCE): S.MAINTENANCE,
    (S.QUARANTINED, E.OPERATOR_MAINTENANCE): S.MAINTENANCE,
    (S.QUARANTINED, E.OPERATOR_RETURN): S.WIPING,
    (S.MAINTENANCE, E.OPERATOR_RETURN): S.WIPING,
    **{(s, E.HARDWARE_FAULT): S.QUARANTINED for s in State if s is not S.QUARANTINED},
    **{(s, E.OPERATOR_QUARANTINE): S.QUARANTINED for s in State if s is not S.QUARANTINED},
    (S.PROVISIONING, E.TENANT_REPORT): S.QUARANTINED,
    (S.ACTIVE, E.TENANT_REPORT): S.QUARANTINED,
    (S.ACTIVE, E.REINSTALL_REQUESTED): S.PROVISIONING,
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
    assert next_state("active", "released") is S.WIPING


def test_unknown_names_are_refused():
    with pytest.raises(ValueError):
        next_state("on_fire", "released")
    with pytest.raises(ValueError):
        next_state("active", "explode")


def test_available_is_reached_only_by_attestation_passed():
    assert {event for (_, event), new in TRANSITIONS.items() if new is S.AVAILABLE} == {E.ATTESTATION_PASSED}


def test_after_a_tenant_inspection_is_reached_only_through_a_successful_wipe():
    into_inspecting = {(old, event) for (old, event), new in TRANSITIONS.items() if new is S.INSPECTING and old != new}
    # A firmware rollout inspects an available node again: available is clean, reached only by attestation.
    assert into_inspecting == {
        (S.ENROLLED, E.INSPECTION_STARTED),
        (S.WIPING, E.WIPE_SUCCEEDED),
        (S.AVAILABLE, E.FIRMWARE_UPDATE),
    }
    assert S.AVAILABLE in CLEAN_STATES


def test_no_path_from_a_tenant_to_available_skips_wipe_and_attestation():
    # Search every path leaving `active`: each one reaching `available` passes wipe_succeeded
    # and then attestation_passed.
    frontier = [(S.ACTIVE, ())]
    seen = set()
    while frontier:
        state, events = frontier.pop()
        for event in (event for (from_state, event) in TRANSITIONS if from_state is state):
            new = next_state(state, event)
            path = (*events, event)
            if new is S.AVAILABLE:
                assert E.WIPE_SUCCEEDED in path
                assert path.index(E.ATTESTATION_PASSED) > path.index(E.WIPE_SUCCEEDED)
            elif (new, event) not in seen:
                seen.add((new, event))
                frontier.append((new, path))


def test_quarantine_is_left_only_by_an_operator_and_only_towards_wiping_or_maintenance():
    leaving = {(event, new) for (old, event), new in TRANSITIONS.items() if old is S.QUARANTINED}
    assert leaving == {(E.OPERATOR_RETURN, S.WIPING), (E.OPERATOR_MAINTENANCE, S.MAINTENANCE)}
    assert {new for (old, _), new in TRANSITIONS.items() if old is S.MAINTENANCE} <= {S.WIPING, S.QUARANTINED}


def test_invariant_sets_do_not_contradict():
    assert not SERVING_STATES & CLEAN_STATES
    assert {S.QUARANTINED} == REASON_REQUIRED


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
