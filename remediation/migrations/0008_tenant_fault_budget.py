import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("remediation", "0007_blast_radius_incidents"),
        ("reservations", "0002_history_append_only"),
    ]

    operations = [
        migrations.AddField(
            model_name="remediation",
            name="self_reported_by",
            field=models.ForeignKey(
                blank=True,
                help_text="The tenant whose node reported this fault of itself: it spends that tenant's budget.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="self_reported_faults",
                to="reservations.tenant",
            ),
        ),
    ]
