"""A reservation's history is append-only, like the node audit log (same trigger function)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("reservations", "0001_initial"), ("fleet", "0003_audit_triggers")]

    operations = [
        migrations.RunSQL(
            "CREATE TRIGGER reservation_history_append_only BEFORE UPDATE OR DELETE ON reservations_reservationevent"
            " FOR EACH ROW EXECUTE FUNCTION fleet_audit_refuse_change();",
            reverse_sql="DROP TRIGGER reservation_history_append_only ON reservations_reservationevent;",
        ),
    ]
