"""Placement: which free nodes a reservation gets, a pure function of (request, free capacity).

No Django import. The service reads free capacity per rack for the requested period inside
a transaction, calls `place`, and inserts allocations; the exclusion constraint on
allocations stays the final guard against double booking.

The fabric is a tree of domains (fleet/fabric.py): the pod at the top, the rack (NVLink domain)
at the bottom, and between them the switch levels each rack's `path` names, such as spine
groups and leaves. A reservation stays inside one domain of its `required` level (a pod unless
it asks for a deeper one), and takes whole domains of its `whole` level if it asks for them
(`rack_scale` is whole racks). Inside the required domain placement chooses the nodes that
minimise, in this order:

1. nodes outside the racks `near` (a growing reservation fills its own racks first);
2. domains spanned at the `preferred` level, if the request names one below the required level;
3. domains spanned at each switch level, the deepest first: fewest leaves, then fewest spine
   groups (and for whole racks, then fewest racks);
4. whole domains broken at each level below the pod (and above a whole level), top down: partly
   used domains are used first, so whole domains stay free for whole-domain requests;
5. free nodes left beside the chosen ones in each domain touched, top down: the tightest fit;
6. nodes chosen without a recent diagnostics pass: a tie-breaker, never a reason to touch
   another domain; then names.

The required domain is chosen by the same order (so by 4 and 5 it is today's pod choice: the
fewest whole racks broken, then the tightest). Placement reads free capacity from the index of
reservations/free_capacity.py: the service keeps one per process and brings it to the requested
period by deltas (`place_in`); `place` builds one of the racks it is given. `objective.Objective`
solves the order exactly by dynamic programming over the index's tree, one table per domain
signature, reading of interchangeable domains only as many as the request can use, so its cost
follows the request and the partly used domains, not the fleet. A fleet without switch levels and
a request without levels has nothing to span, and takes the direct greedy `greedy.place_in_pods`
over each pod's racks grouped by signature. tests/support/placement_reference.py keeps the walk of
every rack this replaced, which the tests and bench/placement.py check it against;
tests/support/placement_baselines.py holds first-fit, random and most-free-first placement to
measure that choice against.

A module a part: `request` (what placement is asked and answers), `choosing` (`place` and
`place_in`), `scope` (what a request may use), `greedy`, `objective`, `sums` (which sizes add up
to a count), `refusals` and `release` (`give_back`); callers import the names below from here.
"""

from fleet.fabric import Path
from reservations.placement.choosing import place, place_in
from reservations.placement.objective import cost_order
from reservations.placement.release import give_back
from reservations.placement.request import Offer, PlacementRefused, PlacementRequest, RackCapacity

__all__ = [
    "Offer",
    "Path",
    "PlacementRefused",
    "PlacementRequest",
    "RackCapacity",
    "cost_order",
    "give_back",
    "place",
    "place_in",
]
