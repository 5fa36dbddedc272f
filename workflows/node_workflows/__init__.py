"""The control plane's hands: inspection, provisioning and wipe, as sequences of idempotent steps.

A worker claims a node under a lease (fleet/leases.py), runs the workflow its state calls for
from the step the node is on, records each step, heartbeats through every wait, and applies
the outcome as a lifecycle event through the fenced update. When that outcome owes more work
(a wipe is followed by inspection) the worker keeps the node and goes straight on, with the
same BMC connection and what it learnt of the BMC. BMC and agent calls happen outside any
database transaction. A step that meets a transient fault gives the node back unchanged;
the reconciler enqueues it again and the workflow resumes at that step, until its deadline.

Hardware that takes long, or hangs, must not hold a worker: a wait that outlasts
WORKFLOW_HOLD_SECONDS parks the node (fleet/leases.py) until it is due to be checked again,
and the worker moves on. The reconciler sends the node again when that hold expires. All a
wait needs is in the database, so neither Redis nor the worker has anything to lose: the step,
when the step began (its timeout counts from then) and, in the step's audit row, what it waits
on. No countdown message is used: a Celery worker holds those in memory until they are due,
and kombu's Redis transport cannot give them back when the broker restarts (the worker dies).

A module a part: `run` (a worker's run and what steers it), the steps of `booting`, `wiping`,
`inspection` and `provisioning`, the `engine` that runs them, and tenants' `power` actions.
Callers import the names below from here.
"""

from workflows.node_workflows.engine import run_workflow
from workflows.node_workflows.power import force_restart_if_stuck, power_action
from workflows.node_workflows.provisioning import stop_idle_diagnostics
from workflows.node_workflows.run import Run

__all__ = [
    "Run",
    "force_restart_if_stuck",
    "power_action",
    "run_workflow",
    "stop_idle_diagnostics",
]
