"""Writes to reservations, a module a feature:

- placing: what every write that places or holds nodes shares (choice, hold, retries, quota);
- booking: a new reservation, now or at its offer;
- releasing: nodes given back, by the tenant or let go of;
- healing: a reservation that lost nodes gets replacements, and its state follows its nodes';
- changes: a new end, more nodes, some given back;
- reconciler: beat's periodic pass over every reservation;
- tenant_keys, reports: a tenant's SSH keys, and its reports of broken nodes.

Callers import the names below from here.
"""

from reservations.services.booking import QUEUED, create_reservation
from reservations.services.changes import ChangeRefused, EndRefused, change_reservation
from reservations.services.healing import heal_reservation, settle_reservation
from reservations.services.placing import QuotaExceeded
from reservations.services.reconciler import (
    expire_reservations,
    notify_ending_reservations,
    provision_held_nodes,
    reconcile_reservations,
    start_due_reservations,
)
from reservations.services.releasing import let_go_of_cut_off_nodes, let_node_go, release_reservation
from reservations.services.reports import ReportRefused, report_node, serving_node
from reservations.services.tenant_keys import KeyRefused, add_ssh_key, delete_ssh_key

__all__ = [
    "QUEUED",
    "ChangeRefused",
    "EndRefused",
    "KeyRefused",
    "QuotaExceeded",
    "ReportRefused",
    "add_ssh_key",
    "change_reservation",
    "create_reservation",
    "delete_ssh_key",
    "expire_reservations",
    "heal_reservation",
    "let_go_of_cut_off_nodes",
    "let_node_go",
    "notify_ending_reservations",
    "provision_held_nodes",
    "reconcile_reservations",
    "release_reservation",
    "report_node",
    "serving_node",
    "settle_reservation",
    "start_due_reservations",
]
