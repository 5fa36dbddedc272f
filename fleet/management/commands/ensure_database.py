from django.core.management.base import BaseCommand, CommandError
from django.db import Error as DatabaseError
from django.db import connection
from psycopg import sql


class Command(BaseCommand):
    help = "Create the configured PostgreSQL database if it does not exist yet."

    def handle(self, *args, **options):
        name = connection.settings_dict["NAME"]
        try:
            # Connects to the server's maintenance database, since ours may not exist.
            with connection._nodb_cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
                if cursor.fetchone():
                    self.stdout.write(f"database {name} exists")
                    return
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)).as_string())
        except DatabaseError as exc:
            host = connection.settings_dict.get("HOST") or "local socket"
            raise CommandError(f"cannot reach PostgreSQL at {host}: {exc}") from exc
        self.stdout.write(f"created database {name}")
