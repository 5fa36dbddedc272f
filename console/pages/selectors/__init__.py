"""Reads for the server-rendered pages, a module a page: the fleet floor, a node's page,
incidents and their replay, remediations, and a tenant's own page.

Every function runs a fixed number of queries whatever the fleet size: rows come back through
values() with the names they need already joined, and counts are aggregated in SQL. Each takes
the viewer's `disclosure` (console/pages/disclosure.py), which decides whom the answer may name.
Callers import the names below from here.
"""

from console.pages.selectors.floor import FloorView, RackView, fleet_floor
from console.pages.selectors.incidents import ACTED_ON, incidents
from console.pages.selectors.node_page import node_page
from console.pages.selectors.remediations import (
    Reliability,
    remediation_reliability,
    remediations,
    remediations_per_day,
    shadow_decisions,
    shadow_tallies,
)
from console.pages.selectors.replay import replay
from console.pages.selectors.tenant import Standing, standing_of, tenant_page

__all__ = [
    "ACTED_ON",
    "FloorView",
    "RackView",
    "Reliability",
    "Standing",
    "fleet_floor",
    "incidents",
    "node_page",
    "remediation_reliability",
    "remediations",
    "remediations_per_day",
    "replay",
    "shadow_decisions",
    "shadow_tallies",
    "standing_of",
    "tenant_page",
]
