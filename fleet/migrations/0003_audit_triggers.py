"""Rules that CHECK constraints cannot express, kept by PostgreSQL triggers.

- The audit log is append-only: UPDATE and DELETE are refused.
- A node is created, or changes state, only together with its audit row: at commit, the
  transaction that wrote the node must have written an audit row for that node and its new
  state. Deferred, so the service may write the row after the compare-and-set update.
"""

from django.db import migrations

AUDIT_APPEND_ONLY = """
CREATE FUNCTION fleet_audit_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER fleet_audit_append_only BEFORE UPDATE OR DELETE ON fleet_auditevent
    FOR EACH ROW EXECUTE FUNCTION fleet_audit_refuse_change();
"""

STATE_CHANGE_AUDITED = """
CREATE FUNCTION fleet_node_state_audited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM fleet_auditevent
        WHERE node_id = NEW.id AND to_state = NEW.state
          AND txid = pg_current_xact_id()::text::bigint
    ) THEN
        RAISE EXCEPTION 'node % entered state % without an audit row', NEW.name, NEW.state
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER fleet_node_insert_audited AFTER INSERT ON fleet_node
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fleet_node_state_audited();
CREATE CONSTRAINT TRIGGER fleet_node_state_change_audited AFTER UPDATE OF state ON fleet_node
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION fleet_node_state_audited();
"""


class Migration(migrations.Migration):
    dependencies = [("fleet", "0002_initial")]

    operations = [
        migrations.RunSQL(
            AUDIT_APPEND_ONLY,
            reverse_sql="DROP TRIGGER fleet_audit_append_only ON fleet_auditevent;"
            " DROP FUNCTION fleet_audit_refuse_change();",
        ),
        migrations.RunSQL(
            STATE_CHANGE_AUDITED,
            reverse_sql="DROP TRIGGER fleet_node_insert_audited ON fleet_node;"
            " DROP TRIGGER fleet_node_state_change_audited ON fleet_node;"
            " DROP FUNCTION fleet_node_state_audited();",
        ),
    ]
