"""Each tenant's API token (rest_framework.authtoken, stored in plaintext) becomes an organisation
key of the tenant, stored as its SHA-256 alone: its holder keeps using it, and the plaintext row
is deleted. The authtoken app is no longer installed; its table, if any, is left empty."""

import hashlib

from django.db import migrations


def hash_the_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if "authtoken_token" not in connection.introspection.table_names():
        return  # a database made after organisations: there never were any
    Tenant = apps.get_model("reservations", "Tenant")
    ApiKey = apps.get_model("reservations", "ApiKey")
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, user_id, created FROM authtoken_token")
        tokens = cursor.fetchall()
    tenants = dict(Tenant.objects.filter(user_id__in=[user for _key, user, _at in tokens]).values_list("user_id", "pk"))
    ApiKey.objects.bulk_create(
        ApiKey(
            tenant_id=tenants[user],
            name="API token from before organisations",
            scope="read-write",
            prefix=f"legacy-{key[:8]}",  # reservations.access.legacy_prefix
            digest=hashlib.sha256(key.encode()).hexdigest(),
            organisation_key=True,
            created_at=created,
        )
        for key, user, created in tokens
        if user in tenants
    )
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM authtoken_token")


class Migration(migrations.Migration):
    dependencies = [("reservations", "0016_organisations_members_keys_invitations")]

    operations = [migrations.RunPython(hash_the_tokens, migrations.RunPython.noop)]
