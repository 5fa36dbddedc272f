"""The admin action's own permission: applying a suppressed remediation."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("remediation", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="remediation",
            options={
                "ordering": ["-at", "-id"],
                "permissions": [
                    ("apply_remediation", "Can apply a suppressed remediation (quarantine as an operator)")
                ],
            },
        ),
    ]
