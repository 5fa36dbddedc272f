"""The XIDs a node's agent reports the moment it sees them, read as alerts; and how such a report
and Alertmanager's alert for the same XID are known to be one occurrence.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from types import MappingProxyType

from remediation.rules.alerts import Alert, timestamp

# What the node's agent reports the moment it sees an XID (POST /v1/agents/{node}/xids), read as
# an alert of its own: the XID table decides it as it decides Prometheus' XID alerts.
AGENT_XID_REPORT = "AgentXidReport"


# How far apart an agent's report and Alertmanager's alert may be and still be one occurrence:
# the XID alerts' increase() window, the longest an alert can follow the XID it fires for.
SAME_OCCURRENCE = timedelta(minutes=5)


# Clocks of the agent and of Prometheus may disagree by this much.
CLOCK_SKEW = timedelta(seconds=30)


def agent_report(*, node: str, gpu: int, xid: int, occurrence: int, seen_at: str) -> Alert:
    """An agent's XID report as an alert. Its key (fingerprint, startsAt) is the occurrence: the
    agent retries a report with the same occurrence and seen_at, which is then recorded once."""
    seen_at = timestamp(seen_at, "seen_at")
    key = hashlib.sha256(f"{node}/{gpu}/{xid}/{occurrence}".encode()).hexdigest()[:16]
    labels = {"node": node, "gpu": str(gpu), "xid": str(xid), "occurrence": str(occurrence), "source": "agent"}
    return Alert(
        name=AGENT_XID_REPORT,
        status="firing",
        labels=MappingProxyType({"alertname": AGENT_XID_REPORT, **labels}),
        annotations=MappingProxyType({}),
        fingerprint=key,
        starts_at=seen_at,
    )
