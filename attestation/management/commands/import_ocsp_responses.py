from django.core.management.base import BaseCommand, CommandError

from attestation.ocsp import import_ocsp_responses


class Command(BaseCommand):
    help = (
        "Import OCSP answers (DER, a file or every file of a directory) for the certificates of NVIDIA's chains,"
        " for a control plane that cannot reach NVIDIA's responder; verify_gpu_evidence checks revocation with them."
    )

    def add_arguments(self, parser):
        parser.add_argument("source", help="An OCSP answer file (DER), or a directory of them.")

    def handle(self, *args, source, **options):
        try:
            outcome = import_ocsp_responses(source)
        except ValueError as error:
            raise CommandError(str(error)) from error
        for name, what in outcome.items():
            self.stdout.write(f"{name}: {what}")
