"""A version number of the fleet's free capacity, moved by triggers on whatever GET /v1/capacity
counts (allocations, a node's state or repair, the switches), so its answer can be kept per process
and checked with a one-row read beside the topology's version (fleet/migrations/0004).

Unlike the topology's, the version is the sequence itself, never a row a trigger updates: every
reservation writes allocations, and writers must not queue on one row. A sequence moves outside
transactions, so a reader may see the new number before the change it stands for commits; the
kept answer's maximum age bounds that (reservations.selectors.capacity_by_pod). The triggers are
per statement, and the node's fires only for statements that set its state or under_repair.
"""

from django.db import migrations

CAPACITY_VERSION = """
CREATE SEQUENCE reservations_capacity_version_seq;
SELECT nextval('reservations_capacity_version_seq');  -- so that the first bump moves last_value
CREATE FUNCTION reservations_bump_capacity_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('reservations_capacity_version_seq');
    RETURN NULL;
END $$;
CREATE TRIGGER reservations_allocation_capacity AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON reservations_allocation FOR EACH STATEMENT EXECUTE FUNCTION reservations_bump_capacity_version();
CREATE TRIGGER fleet_node_capacity AFTER INSERT OR UPDATE OF state, under_repair OR DELETE OR TRUNCATE
    ON fleet_node FOR EACH STATEMENT EXECUTE FUNCTION reservations_bump_capacity_version();
CREATE TRIGGER fleet_fabricswitch_capacity AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON fleet_fabricswitch FOR EACH STATEMENT EXECUTE FUNCTION reservations_bump_capacity_version();
"""

DROP_CAPACITY_VERSION = """
DROP TRIGGER reservations_allocation_capacity ON reservations_allocation;
DROP TRIGGER fleet_node_capacity ON fleet_node;
DROP TRIGGER fleet_fabricswitch_capacity ON fleet_fabricswitch;
DROP FUNCTION reservations_bump_capacity_version();
DROP SEQUENCE reservations_capacity_version_seq;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0018_node_attributes"),
        ("reservations", "0012_placement_request"),
    ]

    operations = [migrations.RunSQL(CAPACITY_VERSION, reverse_sql=DROP_CAPACITY_VERSION)]
