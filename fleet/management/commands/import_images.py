from django.core.management.base import BaseCommand, CommandError

from core.sources import read_json
from core.validation import Invalid
from fleet.catalogue import parse_catalogue
from fleet.services import import_images


class Command(BaseCommand):
    help = (
        'Add OS images to the catalogue tenants choose from: {"images": [{"name", "os", "url", "sha256", '
        '"default"?}]} from a file or a URL (e.g. bmcsim\'s). Known names are brought up to date.'
    )

    def add_arguments(self, parser):
        parser.add_argument("source", help="A path, or e.g. http://127.0.0.1:8100/bmcsim/v1/images")

    def handle(self, *args, source, **options):
        try:
            added, updated = import_images(parse_catalogue(read_json(source)))
        except Invalid as error:
            raise CommandError(f"{source}: {error}") from error
        self.stdout.write(f"{added} images added, {updated} updated from {source}")
