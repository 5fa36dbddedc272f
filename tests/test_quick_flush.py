"""The tests' flush (tests/support/quick_flush) leaves every table empty, the append-only ones too."""

from django.apps import apps
from django.core.management import call_command

from fleet.models import AuditEvent


def test_a_flush_empties_every_table_a_test_wrote(transactional_db, active_node, broker):
    written = [model for model in apps.get_models() if model._default_manager.exists()]
    assert AuditEvent in written and len(written) > 10

    call_command("flush", verbosity=0, interactive=False, inhibit_post_migrate=True)

    assert [model for model in apps.get_models() if model._default_manager.exists()] == []
