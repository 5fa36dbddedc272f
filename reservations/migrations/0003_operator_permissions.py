"""The admin actions' own permissions: releasing any reservation, revoking a tenant's tokens."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reservations", "0002_history_append_only"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="reservation",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [("release_reservation", "Can release any tenant's reservation")],
            },
        ),
        migrations.AlterModelOptions(
            name="tenant",
            options={
                "ordering": ["name"],
                "permissions": [("revoke_tenant_tokens", "Can revoke a tenant's API tokens")],
            },
        ),
    ]
