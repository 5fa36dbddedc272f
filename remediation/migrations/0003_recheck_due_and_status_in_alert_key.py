"""When a GPU's recheck is due, in the database (the reconciler sends it then, rather than a
countdown message that Redis can lose), and the alert's status in its idempotency key (a
resolved notification received first no longer swallows the firing one)."""

from django.db import migrations, models
from django.db.models import F


def pending_rechecks_are_due_now(apps, schema_editor):
    """A recheck still pending now was sent as a countdown message, maybe lost: due at once."""
    Remediation = apps.get_model("remediation", "Remediation")
    Remediation.objects.filter(status="pending").update(recheck_due_at=F("at"))


class Migration(migrations.Migration):
    dependencies = [
        ("remediation", "0002_operator_permissions"),
    ]

    operations = [
        migrations.AddField(
            model_name="remediation",
            name="recheck_due_at",
            field=models.DateTimeField(blank=True, help_text="When the GPU's recheck is due.", null=True),
        ),
        migrations.RunPython(pending_rechecks_are_due_now, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="remediation",
            index=models.Index(
                condition=models.Q(("status", "pending")),
                fields=["recheck_due_at"],
                name="remediation_recheck_due_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="remediation",
            constraint=models.CheckConstraint(
                condition=models.Q(models.Q(("status", "pending"), _negated=True), ("recheck_due_at__isnull", False), _connector="OR"),
                name="remediation_pending_has_recheck_due",
            ),
        ),
        migrations.RemoveConstraint(
            model_name="remediation",
            name="remediation_once_per_alert",
        ),
        migrations.AddConstraint(
            model_name="remediation",
            constraint=models.UniqueConstraint(
                fields=("fingerprint", "starts_at", "alert_status"), name="remediation_once_per_alert_status"
            ),
        ),
    ]
