"""The blast-radius cap through the real services: any sequence of strikes, repairs, quarantines
and returns to service lets act exactly what the cap's definition allows, counts a returned node's
new incident again, and leaves a history that check_invariants finds sound."""

import hypothesis
import pytest
from django.db import transaction
from hypothesis import strategies as st

from fleet.models import Node
from remediation import rules, services
from remediation.models import Remediation
from tests.support.examples import examples
from tests.support.factories import alert, drive, payload
from tests.support.invariants import check_all

CAP, POD_CAP = 3, 2
# Two nodes of p1 (rack r01) and two of p2 (r02) in the 12-node fleet: few enough that nodes are
# struck again after their return, and the caps fill.
NODES = [0, 1, 8, 9]
RETURN = ("operator_return", "wipe_succeeded", "inspection_passed", "attestation_passed")

operations = st.lists(
    st.one_of(
        # XID 140 quarantines at once; XID 79's ladder climbs (reboot, power cycle, quarantine).
        st.tuples(st.just("strike"), st.integers(0, len(NODES) - 1), st.sampled_from([140, 79])),
        st.tuples(st.just("finish"), st.booleans()),  # the oldest ladder's rung: healthy or not
        st.tuples(st.just("return")),  # an operator returns every quarantined node to service
    ),
    max_size=20,
)


def strike(node: Node, xid: int, n: int) -> Remediation:
    [firing] = rules.parse_webhook(payload(alert(node.name, xid=xid, n=n)))
    assert isinstance(firing, rules.Alert)
    (remediation,) = services.receive_alerts([firing])
    return remediation


@pytest.mark.django_db
@hypothesis.settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(operations)
def test_any_sequence_acts_within_the_cap_and_a_returned_node_struck_again_counts_again(
    available_fleet, settings, drawn
):
    settings.REMEDIATION_CAP, settings.REMEDIATION_POD_CAP = CAP, POD_CAP
    nodes = [available_fleet[i] for i in NODES]
    with transaction.atomic():
        # Everything happens within one window: every incident let act counts to the end.
        incidents: list[str] = []  # the pod of each incident let act
        for n, operation in enumerate(drawn):
            if operation[0] == "strike":
                node = Node.objects.select_related("rack__pod").get(pk=nodes[operation[1]].pk)
                ladder_climbing = Remediation.objects.filter(node=node, status="pending").exists()
                remediation = strike(node, operation[2], n)
                pod = node.rack.pod.name
                if node.state == "quarantined" or ladder_climbing:
                    assert remediation.status == "no_action"
                elif len(incidents) < CAP and incidents.count(pod) < POD_CAP:
                    assert remediation.status in ("applied", "pending"), remediation.reason
                    incidents.append(pod)
                else:
                    assert remediation.status == "suppressed", remediation.reason
            elif operation[0] == "finish":
                climbing = Remediation.objects.filter(status="pending").order_by("pk").first()
                if climbing is not None:
                    services.step_finished(remediation_id=climbing.pk, healthy=operation[1])
            else:
                for node in Node.objects.filter(pk__in=[node.pk for node in nodes], state="quarantined"):
                    drive(node, *RETURN)
        assert [v for v in check_all() if v.check == "remediation_cap"] == []
        transaction.set_rollback(True)
