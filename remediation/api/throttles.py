"""How often a node's agent may report XIDs: a fixed window per node (core.throttles), so that a
tenant with root on its node cannot flood the control plane with reports of it."""

from __future__ import annotations

from django.conf import settings

from core.throttles import FixedWindowThrottle


class AgentXidReportThrottle(FixedWindowThrottle):
    """GPUFLEET_AGENT_XID_REPORT_RATE per node, keyed on the node the route names: throttles run
    after authentication, so it is the node whose credential the report carries."""

    scope = "agent_xid_reports"

    def get_rate(self):
        # Read at every request, not once at import: override_settings then applies.
        return settings.AGENT_XID_REPORT_RATE

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": view.kwargs["node"]}
