from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from attestation.gpu_rims_import import RimRefused, import_gpu_rims, read_documents


class Command(BaseCommand):
    help = (
        "Import NVIDIA's RIMs (a file, every file of a directory, or an http(s) URL) as the reference values"
        " of their driver and VBIOS releases, each only if NVIDIA signed it (the nvidia_rim_root trust anchor)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "source", help="A RIM file, a directory of them, or e.g. https://rim.attestation.nvidia.com/v1/rim/<id>"
        )
        parser.add_argument(
            "--at",
            type=datetime.fromisoformat,
            help="Verify the signing chains as of this ISO time (with its zone) rather than now: for archived RIMs.",
        )

    def handle(self, *args, source, at, **options):
        if at is not None and at.tzinfo is None:
            raise CommandError("--at needs a time zone, e.g. 2024-01-01T00:00:00+00:00")
        try:
            outcome = import_gpu_rims(read_documents(source), at=at)
        except (RimRefused, ValueError) as error:
            raise CommandError(f"{source}: {error}") from error
        for rim_id, what in outcome.items():
            self.stdout.write(f"{rim_id}: {what}")
