"""PostgreSQL, as the public listener's role reads it: whole rows come back without the columns
it may not read (gpufleet.public_database.compiler)."""

from django.db.backends.postgresql import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    compiler_module = "gpufleet.public_database.compiler"


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
