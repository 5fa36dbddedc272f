"""Migrations only expand the schema: the previous release's web and workers, still running while
the deployment migrates and until they are replaced, must keep working on the new schema
(tests/e2e/test_previous_release.py runs them on it).

So a migration adds tables and columns (nullable, or NOT NULL with a db_default, since the old
code's INSERTs leave a column it does not know out) and never removes, renames or tightens what
the old code reads and writes. Removing is the contract step, a release after the code stopped
using the column or table: its migration says so with a module-level CONTRACT_STEP naming what
stopped using it, when. Removing a field from the models in the same release as its code, and from
the database a release later, is SeparateDatabaseAndState's state_operations, which this allows.

Read from the migration files through Django's MigrationLoader (no database): the operations and
the model state each one starts from. The migrations that existed when the rule came (BASELINE
and everything before them) are not held to it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest
from django.apps import apps
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState
from django.db.models.fields import NOT_PROVIDED

from tests.support import REPO_ROOT

# Each app's newest migration when the rule came; those and the ones before them are grandfathered.
BASELINE = {
    "attestation": "0003_attestation_result_kind",
    "fleet": "0026_audit_names_the_person",
    "remediation": "0008_tenant_fault_budget",
    "reservations": "0019_members_signed_out",
}
REMOVING = (migrations.RemoveField, migrations.DeleteModel, migrations.RenameField, migrations.RenameModel)
# SQL the old code's queries cannot survive: a table or column gone, renamed, or newly NOT NULL,
# or a NOT NULL column added with no DEFAULT.
BREAKING_SQL = re.compile(
    r"\bDROP\s+(TABLE|COLUMN)\b|\bRENAME\b|\bSET\s+NOT\s+NULL\b"
    r"|\bADD\s+COLUMN\b(?![^;]*\bDEFAULT\b)[^;]*\bNOT\s+NULL\b",
    re.IGNORECASE,
)


def project_apps() -> set[str]:
    """The apps of this repository that have migrations: its top-level folders, not Django's or a
    library's (the virtual environment's folder is in the repository's too)."""
    return {
        config.label
        for config in apps.get_app_configs()
        if Path(config.path).parent == REPO_ROOT and (Path(config.path) / "migrations").is_dir()
    }


def new_migrations(loader: MigrationLoader) -> list[tuple[str, str]]:
    """The project's migrations that are neither BASELINE's nor before them, in the order they apply."""
    grandfathered = {key for app, name in BASELINE.items() for key in loader.graph.forwards_plan((app, name))}
    ours = project_apps()
    leaves = [key for key in loader.graph.leaf_nodes() if key[0] in ours]
    plan = [key for leaf in leaves for key in loader.graph.forwards_plan(leaf)]
    return [key for key in dict.fromkeys(plan) if key[0] in ours and key not in grandfathered]


def is_contract_step(module: ModuleType) -> bool:
    """Whether a migration's module says it is the contract step of an earlier release's expand."""
    marker = getattr(module, "CONTRACT_STEP", None)
    return isinstance(marker, str) and marker.strip() != ""


def breaking_operations(
    app: str, operations: Sequence[Operation], state: ProjectState, created: set[str] | None = None
) -> list[str]:
    """What in `operations`, applied from `state` (advanced as they go), the previous release's
    processes cannot survive. What they do to a table `created` in the same migration they may:
    the previous release does not know it."""
    created = set() if created is None else created
    found = []
    for operation in operations:
        if isinstance(operation, migrations.CreateModel):
            created.add(operation.name_lower)
        elif isinstance(operation, migrations.SeparateDatabaseAndState):
            # Only the database's half touches the schema; state_operations change what the new code sees.
            found += breaking_operations(app, operation.database_operations, state.clone(), created)
        elif _model_of(operation) not in created and (problem := _breaking(app, operation, state)):
            found.append(f"{operation.describe()}: {problem}")
        operation.state_forwards(app, state)
    return found


def _model_of(operation: Operation) -> str | None:
    """The (lower-case) name of the model an operation changes, if it changes one."""
    return getattr(operation, "model_name_lower", None) or getattr(operation, "name_lower", None)


def _breaking(app: str, operation: Operation, state: ProjectState) -> str | None:
    if isinstance(operation, REMOVING):
        return "removes or renames what the previous release still reads and writes"
    if isinstance(operation, migrations.AlterModelTable):
        return "renames a table the previous release still uses"
    if isinstance(operation, migrations.AddField) and _needs_a_value(operation.field):
        return "NOT NULL without a db_default: the previous release's INSERTs leave it out"
    if isinstance(operation, migrations.AlterField):
        before = state.models[app, operation.model_name_lower].fields[operation.name]
        return _tightened(before, operation.field)
    if isinstance(operation, migrations.RunSQL):
        sql = operation.sql if isinstance(operation.sql, list | tuple) else [operation.sql]
        statements = [s if isinstance(s, str) else s[0] for s in sql]
        if any(BREAKING_SQL.search(statement) for statement in statements):
            return "SQL that drops, renames or makes NOT NULL what the previous release uses, or adds what it must fill"
    return None


def _needs_a_value(field: models.Field) -> bool:
    """Whether an INSERT that leaves the column out fails: a NOT NULL column the database fills not."""
    column_less = field.many_to_many or field.generated
    return not column_less and not field.null and field.db_default is NOT_PROVIDED


def _tightened(before: models.Field, after: models.Field) -> str | None:
    if before.db_column != after.db_column:
        return "renames a column the previous release still uses"
    if before.null and not after.null:
        # Even with a db_default: the previous release writes None there itself.
        return "makes a column NOT NULL that the previous release may write NULL to"
    if before.db_default is not NOT_PROVIDED and _needs_a_value(after):
        return "drops the db_default the previous release's INSERTs rely on"
    return None


def violations(loader: MigrationLoader) -> dict[str, list[str]]:
    found = {}
    for key in new_migrations(loader):
        migration = loader.graph.nodes[key]
        if is_contract_step(sys.modules[type(migration).__module__]):
            continue
        state = loader.project_state(key, at_end=False)
        if problems := breaking_operations(key[0], migration.operations, state):
            found[".".join(key)] = problems
    return found


def test_new_migrations_only_expand_the_schema():
    assert violations(MigrationLoader(None, ignore_no_migrations=True)) == {}, (
        "add tables, and columns that are nullable or have a db_default; remove or rename a release after the "
        "code stopped using them, in a migration that says so with CONTRACT_STEP (docs/development.md, A model)"
    )


def test_the_baseline_names_migrations_that_exist():
    """A squash or a rename must move BASELINE along, or the rule would bind the grandfathered ones."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    assert [key for key in BASELINE.items() if key not in graph.nodes] == []
    assert project_apps() >= set(BASELINE)


# The rule itself, on operations against the models as the migrations leave them.
NULLABLE = models.DateTimeField(null=True)


@pytest.mark.parametrize(
    "operation",
    [
        migrations.RemoveField("membership", "signed_out_at"),
        migrations.DeleteModel("Membership"),
        migrations.RenameField("membership", "signed_out_at", "left_at"),
        migrations.RenameModel("Membership", "Member"),
        migrations.AlterModelTable("membership", "reservations_member"),
        migrations.AddField("membership", "seen_at", models.DateTimeField()),
        migrations.AddField("membership", "seen", models.BooleanField(default=False)),
        migrations.AlterField("membership", "signed_out_at", models.DateTimeField()),
        migrations.AlterField("membership", "signed_out_at", models.DateTimeField(null=True, db_column="left_at")),
        migrations.RunSQL("ALTER TABLE reservations_membership DROP COLUMN signed_out_at"),
        migrations.RunSQL(["ALTER TABLE reservations_membership RENAME TO reservations_member"]),
        migrations.RunSQL([("ALTER TABLE reservations_membership ALTER signed_out_at SET NOT NULL", [])]),
        migrations.RunSQL("ALTER TABLE reservations_membership ADD COLUMN seen boolean NOT NULL"),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RemoveField("membership", "signed_out_at")]
        ),
    ],
    ids=lambda operation: operation.describe(),
)
def test_what_the_previous_release_cannot_survive_is_found(operation):
    assert len(_check(operation)) == 1


@pytest.mark.parametrize(
    "operation",
    [
        migrations.AddField("membership", "seen_at", NULLABLE),
        migrations.AddField("membership", "seen", models.BooleanField(default=False, db_default=False)),
        migrations.AlterField("membership", "signed_out_at", models.DateTimeField(null=True, db_index=True)),
        migrations.CreateModel("Visit", [("id", models.BigAutoField(primary_key=True)), ("at", NULLABLE)]),
        migrations.SeparateDatabaseAndState(state_operations=[migrations.RemoveField("membership", "signed_out_at")]),
        migrations.RunSQL("DROP TRIGGER IF EXISTS membership_audit ON reservations_membership"),
        migrations.RunSQL("ALTER TABLE reservations_membership ADD COLUMN seen boolean NOT NULL DEFAULT false"),
        migrations.RunPython(migrations.RunPython.noop),
    ],
    ids=lambda operation: operation.describe(),
)
def test_what_only_expands_passes(operation):
    assert _check(operation) == []


def test_a_table_made_in_the_same_migration_is_the_new_release_s_alone():
    made = migrations.CreateModel("Visit", [("id", models.BigAutoField(primary_key=True))])
    membership = migrations.AddField("visit", "membership", models.ForeignKey("Membership", models.CASCADE))
    renamed = migrations.RenameField("visit", "membership", "member")
    assert _check(made, membership, renamed) == []
    assert (
        len(_check(migrations.AddField("membership", "sponsor", models.ForeignKey("Membership", models.CASCADE)))) == 1
    )


def test_dropping_a_db_default_from_a_not_null_column_is_found():
    added = migrations.AddField("membership", "seen", models.BooleanField(db_default=False))
    dropped = migrations.AlterField("membership", "seen", models.BooleanField(default=False))
    assert _check(added, dropped) == [
        f"{dropped.describe()}: drops the db_default the previous release's INSERTs rely on"
    ]


@pytest.mark.parametrize(
    ("marker", "contract"),
    [
        ({}, False),
        ({"CONTRACT_STEP": " "}, False),
        ({"CONTRACT_STEP": "Membership.signed_out_at: unused since 1.4"}, True),
    ],
)
def test_a_contract_step_says_so_with_what_stopped_using_it(marker, contract):
    migration = ModuleType("reservations.migrations.0099_remove_membership_signed_out_at")
    vars(migration).update(marker)
    assert is_contract_step(migration) is contract


def _check(*operations: Operation) -> list[str]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    state = loader.project_state(("reservations", BASELINE["reservations"]))
    return breaking_operations("reservations", operations, state)
