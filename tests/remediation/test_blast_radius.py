"""The blast-radius cap's one definition, without a database: what counts in a window, why an
incident is refused, and that a history the decision let through never breaks the cap."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from remediation.blast_radius import Cap, Incident, breaches, refusal

START = datetime(2026, 12, 5, tzinfo=UTC)
CAP = Cap(fleet=3, pod=2, window=timedelta(seconds=600))


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def incident(key: int, began: float, ended: float | None, *, node: str = "", pod: str = "p1") -> Incident:
    return Incident(key, node or f"node-{key:03d}", pod, at(began), None if ended is None else at(ended))


def test_an_incident_counts_from_its_start_until_a_window_after_it_ended():
    repaired = incident(1, 100, 160)
    assert not repaired.counts_at(at(99), CAP.window)
    assert repaired.counts_at(at(100), CAP.window)
    assert repaired.counts_at(at(759), CAP.window)
    assert not repaired.counts_at(at(760), CAP.window)


def test_a_ladder_still_climbing_counts_however_long_ago_it_began():
    assert incident(1, 0, None).counts_at(at(86_400), CAP.window)


def test_a_new_incident_on_a_node_returned_to_service_counts_again():
    # node-001 quarantined at once, returned, struck again: two incidents, and the cap of 3 is full.
    history = [
        incident(1, 0, 0, node="node-001", pod="p1"),
        incident(2, 60, 60, node="node-001", pod="p1"),
        incident(3, 120, 120, node="node-002", pod="p2"),
    ]
    assert refusal(CAP, history, pod="p3", at=at(180)) == "3 automatic remediations in the last 10 minutes (cap 3)"
    assert refusal(CAP, history, pod="p3", at=at(600)) is None  # the first ended a window ago


def test_the_pod_cap_counts_the_pods_incidents_alone():
    history = [incident(1, 0, None, pod="p1"), incident(2, 10, 20, pod="p1")]
    assert refusal(CAP, history, pod="p1", at=at(30)) == (
        "2 automatic remediations in pod p1 in the last 10 minutes (pod cap 2)"
    )
    assert refusal(CAP, history, pod="p2", at=at(30)) is None


def test_a_history_over_the_cap_is_one_breach_per_incident_that_began_into_a_full_window():
    history = [incident(n, 10 * n, 10 * n, pod=f"p{n}") for n in range(1, 6)]
    found = list(breaches(CAP, history))
    assert [(b.pod, len(b.incidents), b.at) for b in found] == [(None, 4, at(40)), (None, 5, at(50))]
    assert list(breaches(CAP, [incident(1, 0, 5), incident(2, 1, 6)])) == []
    (in_pod,) = breaches(CAP, [incident(1, 0, 5), incident(2, 1, 6), incident(3, 700, 700), incident(4, 2, 2)])
    assert (in_pod.pod, in_pod.limit, [i.remediation for i in in_pod.incidents]) == ("p1", 2, [1, 2, 4])


# Histories in whole seconds, so that every window can be tried: a strike on one of a few nodes in
# two pods, after a pause, and how long its ladder then acted (or that it still climbs).
strikes = st.lists(
    st.tuples(
        st.integers(0, 5),  # node: 0-2 in p1, 3-5 in p2
        st.integers(0, 400),  # seconds after the strike before
        st.none() | st.integers(0, 900),  # how long it acted; None while it climbs
    ),
    max_size=30,
)


def history_from(drawn) -> list[Incident]:
    began, history = 0, []
    for key, (node, pause, lasted) in enumerate(drawn):
        began += pause
        pod = "p1" if node < 3 else "p2"
        history.append(incident(key, began, None if lasted is None else began + lasted, node=f"n{node}", pod=pod))
    return history


def most_in_any_window(history: list[Incident], now: int) -> tuple[int, dict[str, int]]:
    """The most incidents any window held, fleet-wide and per pod, trying every whole second."""
    fleet = 0
    pods: dict[str, int] = {}
    for second in range(now + int(CAP.window.total_seconds()) + 1):
        counted = [i for i in history if i.counts_at(at(second), CAP.window)]
        fleet = max(fleet, len(counted))
        for pod in ("p1", "p2"):
            pods[pod] = max(pods.get(pod, 0), sum(1 for i in counted if i.pod == pod))
    return fleet, pods


@given(strikes)
def test_breaches_finds_a_history_over_the_cap_exactly_when_some_window_held_too_many(drawn):
    history = history_from(drawn)
    now = max((int((i.ended or i.began).timestamp() - START.timestamp()) for i in history), default=0)
    fleet, pods = most_in_any_window(history, now)
    found = list(breaches(CAP, history))
    assert any(b.pod is None for b in found) == (fleet > CAP.fleet)
    assert {b.pod for b in found if b.pod} == {pod for pod, most in pods.items() if most > CAP.pod}


@given(strikes)
def test_what_the_decision_lets_act_never_breaks_the_cap_repeats_and_returns_included(drawn):
    # A strike acts only if `refusal` lets it, against what acted before; a node struck again
    # after its incident ended (returned to service) is a new incident like any other.
    acted: list[Incident] = []
    for candidate in history_from(drawn):
        climbing = any(i.node == candidate.node and (i.ended is None or i.ended > candidate.began) for i in acted)
        if climbing:  # one ladder per node at a time: the service records the alert and leaves it
            continue
        if refusal(CAP, acted, pod=candidate.pod, at=candidate.began) is None:
            acted.append(candidate)
    assert list(breaches(CAP, acted)) == []
