"""A version number of the fleet's topology (pods, racks, which node sits where), bumped by
triggers, so placement can keep the topology per process and check it with a one-row read.

The number comes from a sequence, so a version seen inside a transaction that rolled back is
never seen again; it is written to a one-row table, so readers see it only with the change
it versions, at commit. The table is not a Django model: a test flush must not empty it.
"""

from django.db import migrations

TOPOLOGY_VERSION = """
CREATE SEQUENCE fleet_topology_version_seq;
CREATE TABLE fleet_topology_version (
    id integer PRIMARY KEY CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO fleet_topology_version VALUES (1, nextval('fleet_topology_version_seq'));
CREATE FUNCTION fleet_bump_topology_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE fleet_topology_version SET version = nextval('fleet_topology_version_seq') WHERE id = 1;
    RETURN NULL;
END $$;
CREATE TRIGGER fleet_node_topology AFTER INSERT OR DELETE OR TRUNCATE ON fleet_node
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_topology_version();
CREATE TRIGGER fleet_node_moved AFTER UPDATE ON fleet_node FOR EACH ROW
    WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.rack_id IS DISTINCT FROM NEW.rack_id
          OR OLD.position IS DISTINCT FROM NEW.position)
    EXECUTE FUNCTION fleet_bump_topology_version();
CREATE TRIGGER fleet_rack_topology AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON fleet_rack
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_topology_version();
CREATE TRIGGER fleet_pod_topology AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON fleet_pod
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_topology_version();
"""

DROP_TOPOLOGY_VERSION = """
DROP TRIGGER fleet_node_topology ON fleet_node;
DROP TRIGGER fleet_node_moved ON fleet_node;
DROP TRIGGER fleet_rack_topology ON fleet_rack;
DROP TRIGGER fleet_pod_topology ON fleet_pod;
DROP FUNCTION fleet_bump_topology_version();
DROP TABLE fleet_topology_version;
DROP SEQUENCE fleet_topology_version_seq;
"""


class Migration(migrations.Migration):
    dependencies = [("fleet", "0003_audit_triggers")]

    operations = [migrations.RunSQL(TOPOLOGY_VERSION, reverse_sql=DROP_TOPOLOGY_VERSION)]
