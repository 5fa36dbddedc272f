"""Alertmanager alerts -> remediation actions: the XID table, the other alerts' rules, the webhook payload,
and the BMC event log entries read as alerts.

Pure: the standard library and core/ only, so it can be read and tested without Django. A module
a part: `ladders`, `alerts` (the webhook's payload), `agent_reports`, `sel_entries`, `decisions`;
callers import the names below from here.

How alerts reach us. Prometheus scrapes every node agent through HTTP service discovery served by
the control plane at GET /v1/prometheus/targets (deploy/prometheus/prometheus.yml, job
`node-agents`). The answer is standard Prometheus http_sd JSON, one group per node, so every
series, and so every alert, carries the node's name in the `node` label:

    [
      {
        "targets": ["127.0.0.1:8100"],
        "labels": {
          "node": "node-001",
          "pod": "p1",
          "rack": "r01",
          "__metrics_path__": "/agent/node-001/metrics",
          "__scheme__": "http"
        }
      }
    ]

- `targets`: exactly one "host:port" of the node's agent (bmcsim serves every agent on one port,
  hence the per-node `__metrics_path__`; the path of the inventory's `agent_url` plus "/metrics").
- `labels`: `node`, `pod`, `rack` as strings, `__metrics_path__`, and `__scheme__` (the agent URL's
  scheme). Nothing else is required.
- Content-Type: application/json; status 200 with `[]` when there are no nodes.
- Which nodes: those whose agent is expected to answer (`available` and `active`); a node being
  rebooted by a workflow or out of service would otherwise raise NodeAgentDown.

Alertmanager (deploy/alertmanager/alertmanager.yml) posts the v4 webhook payload to
POST /v1/alerts/alertmanager; the view checks its envelope, `parse_alerts` each alert, and
`decide` maps each alert to an action. The alert rules are in deploy/prometheus/rules/gpu.yml;
tests check that their XID lists and this table agree.

Two more sources are read as alerts and decided by the same rules: the XIDs a node's agent reports
the moment it sees them (`agent_report`), and the new entries of each BMC's system event log (SEL),
which the control plane reads (workflows/bmc_event_logs.py, `sel_entry`). What an entry calls for
rests on the BMC's severity, since the BMC knows what we do not (a power supply that fails is a
Warning while a redundant one carries the node, Critical when none does):

- Critical (`BMCCriticalEvent`): hardware failed, `hardware_failed`: quarantined for an operator.
  But a platform error at a GPU (DMTF's PlatformErrorAtLocation, the entry's OriginOfCondition a
  GPU Processor) is the GPU's PCIe link lost, what XID 79 reports from the driver's side: XID 79's
  ladder, `gpu_lost` (a reboot, then a power cycle, bring most back). The agent's report and the
  SEL entry of one such fault are one occurrence, acted on once (remediation.services).
- Warning (`BMCWarningEvent`): recorded, nothing done (`none`): a fan, a redundant power supply.
- OK, or no severity: nothing to record.

An entry's reason reads `sel: <MessageId>: <Message>`. A tenant with root on its node can add SEL
entries through the BMC's in-band interface, as it can report XIDs: for its own node only. What the
node says of itself while a tenant holds it spends that tenant's budget, not the fleet's cap
(`said_by_the_node`, remediation/rules/self_reports.py).
"""

from remediation.rules.agent_reports import AGENT_XID_REPORT, CLOCK_SKEW, SAME_OCCURRENCE, agent_report
from remediation.rules.alerts import (
    FINGERPRINT,
    MAX_ALERT_NAME,
    MAX_ALERTS,
    MAX_TEXT,
    STATUSES,
    Alert,
    PayloadError,
    RefusedAlert,
    annotation_set,
    label_set,
    parse_alerts,
    parse_webhook,
)
from remediation.rules.decisions import ALERTS, XID_ALERTS, XIDS, decide, is_xid_alert, xids_of
from remediation.rules.ladders import (
    LADDERS,
    NODE_STEPS,
    REPEAT_OFFENDER,
    Decision,
    Ladder,
    Mode,
    RepeatOffender,
    Step,
    after_step,
    repeat_offense,
)
from remediation.rules.sel_entries import (
    BMC_CRITICAL_EVENT,
    BMC_SENSORS,
    BMC_WARNING_EVENT,
    HOST_SOFTWARE,
    sel_entry,
)
from remediation.rules.self_reports import said_by_the_node

__all__ = [
    "AGENT_XID_REPORT",
    "ALERTS",
    "BMC_CRITICAL_EVENT",
    "BMC_SENSORS",
    "BMC_WARNING_EVENT",
    "CLOCK_SKEW",
    "FINGERPRINT",
    "HOST_SOFTWARE",
    "LADDERS",
    "MAX_ALERTS",
    "MAX_ALERT_NAME",
    "MAX_TEXT",
    "NODE_STEPS",
    "REPEAT_OFFENDER",
    "SAME_OCCURRENCE",
    "STATUSES",
    "XIDS",
    "XID_ALERTS",
    "Alert",
    "Decision",
    "Ladder",
    "Mode",
    "PayloadError",
    "RefusedAlert",
    "RepeatOffender",
    "Step",
    "after_step",
    "agent_report",
    "annotation_set",
    "decide",
    "is_xid_alert",
    "label_set",
    "parse_alerts",
    "parse_webhook",
    "repeat_offense",
    "said_by_the_node",
    "sel_entry",
    "xids_of",
]
