"""Placement's per-process topology: read again exactly when enrolment or a move changed it."""

import pytest
from django.db import transaction

from core.kept import Kept
from fleet.models import Node, Rack
from reservations import selectors
from reservations.selectors import placement_reads
from tests.support.factories import drive, enrol_default_fleet


class Rollback(Exception):
    pass


@pytest.mark.django_db(transaction=True)
def test_the_topology_is_read_again_only_after_it_changed():
    nodes = enrol_default_fleet(10)
    first = selectors.topology()
    assert selectors.topology() is first
    drive(nodes[0], "inspection_started")  # work on a node is no change of topology
    assert selectors.topology() is first

    moved = nodes[0]
    other_rack = Rack.objects.exclude(pk=moved.rack_id).first()
    assert other_rack is not None
    Node.objects.filter(pk=moved.pk).update(rack=other_rack, position=99)
    after_move = selectors.topology()
    assert after_move is not first
    assert after_move.racks[after_move.rack_of[moved.pk]].rack == other_rack.name

    enrol_default_fleet(12)
    assert len(selectors.topology().node_ids) == 12


@pytest.mark.django_db(transaction=True)
def test_a_topology_seen_inside_a_rolled_back_enrolment_is_never_taken_for_the_current_one():
    enrol_default_fleet(10)
    with pytest.raises(Rollback), transaction.atomic():
        enrol_default_fleet(12)
        assert len(selectors.topology().node_ids) == 12
        raise Rollback
    assert len(selectors.topology().node_ids) == 10


@pytest.mark.django_db(transaction=True)
def test_warming_builds_placements_topology_and_index_before_any_placement(monkeypatch):
    enrol_default_fleet(10)
    monkeypatch.setattr(placement_reads, "_topology", Kept())
    monkeypatch.setattr(placement_reads, "_kept_free", Kept())
    selectors.warm_placement()  # what each web worker does as it imports gpufleet.wsgi
    kept = placement_reads._kept_free.get(selectors.topology().version, lambda: pytest.fail("no index was kept"))
    assert kept.version == selectors.topology().version and len(kept.names) == 10
