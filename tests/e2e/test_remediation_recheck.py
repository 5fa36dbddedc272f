"""A GPU recheck that no message was ever sent for, to the control plane's broker, is still made:
beat's reconciler finds it due in the database and a worker rechecks the GPU."""

from io import StringIO

from django.core.management import call_command

from fleet.models import Node
from remediation import rules, services
from remediation.models import Remediation
from tests.support.factories import alert, make_available, payload
from tests.support.processes import wait_for


def test_a_recheck_whose_message_was_never_enqueued_is_made_by_the_reconciler(bmcsim, control_plane, settings):
    call_command("seed_fleet", "--bmcsim-url", bmcsim.url, stdout=StringIO())
    node = make_available(list(Node.objects.order_by("name")))[0]
    bmcsim.reset(node.system_id, "On")  # its agent answers, and reports every GPU healthy
    settings.REMEDIATION_RECHECK_SECONDS = 0
    reset_xid = min(rules.xids_with(rules.Action.RECHECK_GPU))
    # Received in this process: whatever it sends goes to the tests' own broker, which no worker reads.
    (pending,) = services.receive_alerts(
        rules.parse_webhook(payload(alert(node.name, xid=reset_xid, name="GPUResetRequiredXid")))
    )
    assert pending.status == "pending"
    control_plane.start_worker("w1")
    control_plane.start_beat()
    wait_for("the recheck", lambda: Remediation.objects.get(pk=pending.pk).status != "pending", timeout=60)
    rechecked = Remediation.objects.get(pk=pending.pk)
    assert rechecked.status == "no_action" and rechecked.reason.endswith("healthy after a GPU reset")
    assert Node.objects.get(pk=node.pk).state == "available"
