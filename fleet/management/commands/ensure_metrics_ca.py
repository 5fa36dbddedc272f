from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from core.metrics_ca import DEFAULT_SERVER_NAMES, ensure


class Command(BaseCommand):
    help = (
        "Make the fleet's metrics CA in DIR where missing (core/metrics_ca.py): ca.pem for every node's "
        "gpu-agent --client-ca, Prometheus' client certificate, a server certificate. What exists is kept."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory", type=Path, help="e.g. var/metrics-ca; the CA's key stays there")
        parser.add_argument(
            "--server-name",
            action="append",
            help="a name or address of the server certificate, again for more "
            f"(default: {', '.join(DEFAULT_SERVER_NAMES)})",
        )

    def handle(self, *args, directory: Path, server_name: list[str] | None, **options):
        try:
            ca = ensure(directory, server_name or DEFAULT_SERVER_NAMES)
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from error
        self.stdout.write(
            f"metrics CA in {ca.directory}: nodes get {ca.ca_cert.name} only, Prometheus {ca.prometheus_cert.name}"
        )
