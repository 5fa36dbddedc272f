"""Which alerts are a node's own word about itself: what software on the node says, which its
tenant, with root there, can say at will. While a tenant holds the node, such a fault spends that
tenant's budget (remediation/blast_radius.py), never the cap that protects the other tenants.

- The node's agent: its XID reports (AGENT_XID_REPORT), and every alert of deploy/prometheus/rules/
  gpu.yml, which reads the agent's metrics (and NodeAgentDown, its silence).
- SEL entries that software on the host wrote (sel_entries.HOST_SOFTWARE).

Out of band, and so under the cap: SEL entries of the BMC's own sensors, and any alert of another
source. On a node that serves no tenant (inspection and wipes run the service image) every fault
is under the cap.
"""

from __future__ import annotations

from remediation.rules.agent_reports import AGENT_XID_REPORT
from remediation.rules.alerts import Alert
from remediation.rules.decisions import ALERTS, XID_ALERTS
from remediation.rules.sel_entries import HOST_SOFTWARE, SEL_ALERTS


def said_by_the_node(alert: Alert) -> bool:
    """Whether the alert rests on what software on its node says (see the module's docstring)."""
    if alert.name == AGENT_XID_REPORT or alert.name in XID_ALERTS or alert.name in ALERTS:
        return True
    if alert.name in SEL_ALERTS.values():
        return alert.labels.get("source") == HOST_SOFTWARE
    return False
