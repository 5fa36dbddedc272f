from django.core.management.base import BaseCommand, CommandError

from attestation.services import import_trust_anchors
from core.sources import read_json


class Command(BaseCommand):
    help = (
        "Install the manufacturer CA and GPU vendor root, and NVIDIA's device and RIM roots where given:"
        " JSON {role: PEM}, a file or a URL (e.g. bmcsim's)."
    )

    def add_arguments(self, parser):
        parser.add_argument("source", help="A path, or e.g. http://127.0.0.1:8100/bmcsim/v1/roots")

    def handle(self, *args, source, **options):
        try:
            roles = import_trust_anchors(read_json(source))
        except (KeyError, ValueError) as error:
            raise CommandError(f"{source}: not usable trust anchors: {error}") from error
        self.stdout.write(f"installed {', '.join(roles)} from {source}")
