"""The fabric sync run in the test's own process, against a bmcsim's NVUE, UFM and NMX-M, as a
worker runs it when a workflow asks (workflows/fabric_sync.py)."""

from __future__ import annotations

from workflows import fabric_sync
from workflows.fabric_managers import drivers_from_settings


def point_managers_at(settings, bmcsim_url: str) -> None:
    """The three managers' URL templates at this bmcsim (pytest-django's `settings` fixture)."""
    settings.ETHERNET_MANAGER_URL = f"{bmcsim_url}/switches/{{switch}}"
    settings.INFINIBAND_MANAGER_URL = f"{bmcsim_url}/pods/{{fabric}}"
    settings.NVLINK_MANAGER_URL = f"{bmcsim_url}/nvlink-domains/{{domain}}"


def sync(*, full: bool = False) -> dict:
    drivers = drivers_from_settings()
    try:
        return fabric_sync.sync_fabrics(drivers=drivers, full=full)
    finally:
        for driver in drivers.values():
            driver.close()
