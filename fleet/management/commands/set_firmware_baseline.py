from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from core.sources import read_json
from core.validation import Invalid
from fleet.firmware import newest_releases, parse_baselines
from fleet.services import set_firmware_baselines


class Command(BaseCommand):
    help = (
        'Set the firmware and BIOS baselines inspection enforces: {"baselines": [{"name", "gpu_model"?, '
        '"components"?: {COMPONENT: {"version", "sha256", "image"?}}, "bios_attributes"?, "secure_boot_required"?, '
        '"boot_releases"?: [RELEASE]}]} '
        "from a file or a URL. A node class's baseline (by GPU model; none: the default) is replaced whole."
    )

    def add_arguments(self, parser):
        parser.add_argument("source", help="A path, e.g. deploy/firmware-baseline.json, or a URL")
        parser.add_argument(
            "--releases",
            metavar="SOURCE",
            help="A vendor's firmware release list (e.g. http://127.0.0.1:8100/bmcsim/v1/firmware-releases): "
            "every baseline expects the newest release of each kind it lists, unless it names its own",
        )

    def handle(self, *args, source, releases, **options):
        try:
            released = newest_releases(read_json(releases)) if releases else {}
        except Invalid as error:
            raise CommandError(f"{releases}: {error}") from error
        try:
            added, replaced = set_firmware_baselines(parse_baselines(read_json(source), released=released))
        except Invalid as error:
            raise CommandError(f"{source}: {error}") from error
        except IntegrityError as error:  # a name another node class's baseline has
            raise CommandError(f"{source}: {error}") from error
        self.stdout.write(f"{added} firmware baselines added, {replaced} replaced from {source}")
