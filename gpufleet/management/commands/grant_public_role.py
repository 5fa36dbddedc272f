from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import Error as DatabaseError
from django.db import connection, transaction
from psycopg import sql

from gpufleet.public_database import PUBLIC_COLUMNS, PUBLIC_SEQUENCES

# Whatever the role was given before is taken back: it reads PUBLIC_COLUMNS, and nothing else.
REVOKE = [
    "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}",
    "REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role}",
    "REVOKE ALL ON SCHEMA public FROM {role}",
    "REVOKE pg_read_all_data, pg_write_all_data FROM {role}",
]
# The role can log in and nothing more; every transaction it begins is read-only.
ATTRIBUTES = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT"


class Command(BaseCommand):
    help = (
        "Create or update the public listener's PostgreSQL role (its PUBLIC_DATABASE_URL's user): SELECT on "
        "the tables and columns the public routes serve (gpufleet/public_database), no write, nothing else. "
        "Idempotent: run it after every migrate."
    )

    def add_arguments(self, parser):
        parser.add_argument("--role", default="gpufleet_public")
        parser.add_argument(
            "--password-file", type=Path, help="set the role's password from this file (else it is left as it is)"
        )

    def handle(self, *args, role: str, password_file: Path | None, **options):
        password = _read_password(password_file) if password_file else None
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                self._grant(cursor, role, password)
        except DatabaseError as error:
            raise CommandError(f"cannot grant the public role {role}: {error}") from error
        self.stdout.write(f"role {role} reads {len(PUBLIC_COLUMNS)} tables, some of their columns, and writes nothing")

    def _grant(self, cursor, role: str, password: str | None) -> None:
        name = sql.Identifier(role)

        def run(statement: str, **parts) -> None:
            cursor.execute(sql.SQL(statement).format(role=name, **parts).as_string(connection.connection))

        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        run("ALTER ROLE {role} WITH " + ATTRIBUTES if cursor.fetchone() else "CREATE ROLE {role} WITH " + ATTRIBUTES)
        if password is not None:
            run("ALTER ROLE {role} WITH PASSWORD {password}", password=sql.Literal(password))
        run("ALTER ROLE {role} SET default_transaction_read_only = on")
        for statement in REVOKE:
            run(statement)
        run("GRANT CONNECT ON DATABASE {database} TO {role}", database=sql.Identifier(connection.settings_dict["NAME"]))
        run("GRANT USAGE ON SCHEMA public TO {role}")
        for table, columns in sorted(PUBLIC_COLUMNS.items()):
            listed = sql.SQL(", ").join(sql.Identifier(column) for column in sorted(columns))
            run("GRANT SELECT ({columns}) ON {table} TO {role}", columns=listed, table=sql.Identifier(table))
        for sequence in sorted(PUBLIC_SEQUENCES):
            run("GRANT SELECT ON SEQUENCE {sequence} TO {role}", sequence=sql.Identifier(sequence))


def _read_password(path: Path) -> str:
    try:
        password = path.read_text().strip()
    except OSError as error:
        raise CommandError(f"{path}: {error.strerror}") from error
    if not password:
        raise CommandError(f"{path} is empty")
    return password
