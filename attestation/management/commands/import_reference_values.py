from django.core.management.base import BaseCommand, CommandError

from attestation.reference import ManifestError
from attestation.services import import_reference_manifest
from core.sources import read_json


class Command(BaseCommand):
    help = "Import a manifest of golden digests per firmware/image release (a file or a URL, e.g. bmcsim's)."

    def add_arguments(self, parser):
        parser.add_argument("source", help="A path, or e.g. http://127.0.0.1:8100/bmcsim/v1/reference-values")

    def handle(self, *args, source, **options):
        try:
            added = import_reference_manifest(read_json(source))
        except ManifestError as error:
            raise CommandError(f"{source}: {error}") from error
        self.stdout.write(f"{added} new reference values from {source}")
