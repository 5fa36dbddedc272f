"""The tests' flush (tests/support/quick_flush) leaves every table empty, the append-only ones too,
but for the content types and permissions that migrating wrote."""

from django.apps import apps
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command

from fleet.models import AuditEvent


def test_a_flush_empties_every_table_a_test_wrote(transactional_db, active_node, broker):
    written = [model for model in apps.get_models() if model._default_manager.exists()]
    assert AuditEvent in written and len(written) > 10

    permissions = set(Permission.objects.values_list("pk", "codename"))

    # as TransactionTestCase flushes, which pytest-django uses after a committing test
    call_command("flush", verbosity=0, interactive=False, reset_sequences=False, inhibit_post_migrate=True)

    assert [model for model in apps.get_models() if model._default_manager.exists()] == [Permission, ContentType]
    assert set(Permission.objects.values_list("pk", "codename")) == permissions
