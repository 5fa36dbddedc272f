"""Signals other apps listen to, so the fleet app need not know them."""

from django.dispatch import Signal

# Sent by fleet.services.transition inside the transaction that applied it, with keyword
# arguments node_id, event, actor, from_state, to_state and reservation_id (the reservation the node
# served before the transition, or None).
node_transitioned = Signal()

# Sent by fleet.services.request_power_action once it is audited and recorded, with
# power_action_id (a PowerAction row): a worker is sent it on commit (workflows).
power_action_requested = Signal()

# Sent by remediation.services inside its transaction when a rung of a remediation ladder is
# decided for a node that serves a reservation (or when the rules only want its tenant told),
# with node_id, reservation_id, gpu, step (a rung, or None), reason and acts_at.
node_remediation_planned = Signal()
