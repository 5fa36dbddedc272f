"""Whole rows of the public listener's tables with the columns it may not read as NULL.

Only where Django picks the columns itself (a model's rows, select_related's joined rows): a
column a query names (a filter, values(), an annotation) is sent as written, so that PostgreSQL
refuses what the role may not read."""

from django.db.backends.postgresql.compiler import (
    SQLAggregateCompiler,
    SQLDeleteCompiler,
    SQLInsertCompiler,
    SQLUpdateCompiler,
)
from django.db.backends.postgresql.compiler import SQLCompiler as PostgreSQLCompiler
from django.db.models import Value
from django.db.models.expressions import Col

from gpufleet.public_database import PUBLIC_COLUMNS

__all__ = ["SQLAggregateCompiler", "SQLCompiler", "SQLDeleteCompiler", "SQLInsertCompiler", "SQLUpdateCompiler"]


class SQLCompiler(PostgreSQLCompiler):
    def get_default_columns(self, select_mask, start_alias=None, opts=None, from_parent=None):
        columns: list[Col] = super().get_default_columns(select_mask, start_alias, opts, from_parent)  # type: ignore[assignment]
        return [column if _readable(column.target) else Unreadable(column.target) for column in columns]


class Unreadable(Value):
    """NULL where a column the role may not read would be; with the column's field as its `target`,
    as Django's loading of rows looks it up."""

    def __init__(self, field):
        super().__init__(None, output_field=field)
        self.target = field


def _readable(field) -> bool:
    """Whether the role reads the column; tables it does not read at all are left to PostgreSQL to refuse."""
    table = field.model._meta.db_table
    return table not in PUBLIC_COLUMNS or field.column in PUBLIC_COLUMNS[table]
