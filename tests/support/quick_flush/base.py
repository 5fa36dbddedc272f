"""PostgreSQL as the project runs it, except that a test's flush empties only the tables with rows.

pytest-django empties the database after every test that commits (transactional_db, live_server)
with Django's flush, one TRUNCATE of every table: about 0.4 s on these machines, however few rows
the test wrote, as PostgreSQL makes every table's files anew. Deleting the few rows there are takes
milliseconds. Every foreign key is deferred to the commit, so the order of the deletes does not
matter; the append-only tables refuse DELETE (their triggers), so those are truncated. The content
types and permissions stay: migrating wrote them, and the post_migrate that follows every flush
would only write them back.
"""

from __future__ import annotations

from django.db.backends.postgresql import base, operations

# What the migrations wrote and no test changes.
KEPT = frozenset({"django_content_type", "auth_permission"})

# Bits of pg_trigger.tgtype: a row trigger (1), before the change (2), on DELETE (8).
ROW_BEFORE_DELETE = 1 | 2 | 8

EMPTY_TABLES_WITH_ROWS = """
DO $flush$
DECLARE
    name text;
    has_rows boolean;
    append_only text[] := '{}';
BEGIN
    FOREACH name IN ARRAY %(tables)s LOOP
        EXECUTE format('SELECT EXISTS (SELECT FROM %%I)', name) INTO has_rows;
        CONTINUE WHEN NOT has_rows;
        IF EXISTS (
            SELECT FROM pg_trigger
            WHERE tgrelid = format('%%I', name)::regclass AND NOT tgisinternal
                AND tgtype & %(row_before_delete)s = %(row_before_delete)s
        ) THEN
            append_only := append_only || name;
        ELSE
            EXECUTE format('DELETE FROM %%I', name);
        END IF;
    END LOOP;
    IF cardinality(append_only) > 0 THEN
        EXECUTE 'TRUNCATE ' || (SELECT string_agg(format('%%I', t), ', ') FROM unnest(append_only) t) || ' CASCADE';
    END IF;
END
$flush$
"""


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        names = ", ".join("'" + table.replace("'", "''") + "'" for table in tables if table not in KEPT)
        return [EMPTY_TABLES_WITH_ROWS % {"tables": f"ARRAY[{names}]::text[]", "row_before_delete": ROW_BEFORE_DELETE}]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
