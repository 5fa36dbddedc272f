"""The public listener's database access: the tables and columns it serves, and nothing else.

PUBLIC_COLUMNS is the one list of what the public listener (gpufleet.settings_public) reads.
`manage.py grant_public_role` grants its PostgreSQL role SELECT on exactly these columns (and
PUBLIC_SEQUENCES) and nothing more (no write, no other table, no other column), and this package's backend
(gpufleet.public_database.base, the public settings' ENGINE) selects the other columns of
these tables as NULL when a query loads whole rows, as `select_related("node")` does: the
process never asks for a column the role may not read. A query that names an unlisted column
or table (a filter, values(), an annotation) is refused by PostgreSQL: the listener fails
closed, with a 500 that tests/hostile_tenant/test_public_listener_role.py would catch.

Left out on purpose: the nodes' BMC addresses and credentials, their agents' addresses and
tokens, and every table of users' data, sessions, tokens, keys, webhooks and config drives.
A route that needs more names it here, and the role is granted again (`make database`, or
the deployment's migration job).
"""

PUBLIC_COLUMNS: dict[str, frozenset[str]] = {
    table: frozenset(columns.split())
    for table, columns in {
        "fleet_pod": "id name",
        "fleet_rack": "id name pod_id fabric_domain_id",
        "fleet_fabriclevel": "id name",
        "fleet_fabricdomain": "id name level_id parent_id",
        "fleet_fabricswitch": "id state health links_down",
        # Read with the sequence below to know whether the kept capacity is current (fleet/migrations/0004).
        "fleet_topology_version": "version",
        "fleet_node": """id name rack_id position serial ssh_host_key_fingerprint reinstall_image_id state
            state_since tenant_id reservation_id quarantine_reason step step_since under_repair attributes
            diagnostic_passed_at diagnostic_level lease_owner lease_expires_at fencing_token""",
        "fleet_gpu": "id node_id index uuid serial model health",
        "fleet_auditevent": "id node_id event from_state to_state actor reason detail at txid",
        "attestation_attestationresult": """id node_id kind nonce affirming failures measurements gpu_evidence token
            kid policy at""",
        # Which nodes are held until their removal from a tenant's networks is read back (capacity, nodes).
        "fleet_networkattachment": "id node_id fabric wanted_id found isolated confirmed checked_at changed_at problem",
        "remediation_remediation": """id node_id gpu action step mode reason status alert alert_status labels
            fingerprint at starts_at counted_from counted_until decided_by forced_at recheck_due_at
            reservation_id reset_before step_started_at""",
        "remediation_incidentevent": "id remediation_id step detail at",
        "reservations_allocation": "node_id period",
        "reservations_reservationevent": "id reservation_id event actor detail at",
        # Names only: the pages take every tenant's and user's name out of what they show.
        "reservations_tenant": "id name user_id created_at",
        "auth_user": "id username",
    }.items()
}
# Read, never advanced: GET /v1/capacity compares the fleet's version (reservations/migrations/0013).
PUBLIC_SEQUENCES = frozenset({"reservations_capacity_version_seq"})
