"""GET /metrics/fleet: gauges of the fleet, read from the database, in Prometheus' text format."""

from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from tests.support.factories import drive


def samples(client) -> dict:
    # With Prometheus's credential (core/prometheus_auth.py), as its scrape sends it.
    answer = client.get("/metrics/fleet", headers={"Authorization": f"Bearer {settings.GPUFLEET_PROMETHEUS_TOKEN}"})
    assert answer.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.content.decode())
        for s in family.samples
    }


def test_nodes_by_state_and_pod(client, fleet):
    drive(fleet[0], "hardware_fault", reason="XID 79")
    found = samples(client)
    assert found[("gpufleet_nodes", (("pod", "p1"), ("state", "quarantined")))] == 1
    assert found[("gpufleet_nodes", (("pod", "p1"), ("state", "enrolled")))] == 7
    assert found[("gpufleet_nodes", (("pod", "p2"), ("state", "enrolled")))] == 4
    assert found[("gpufleet_reservations", (("state", "active"),))] == 0
    assert found[("gpufleet_gpus", (("health", "unknown"),))] == 96
