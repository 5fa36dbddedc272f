from django.core.management.base import BaseCommand, CommandError

from attestation import published_keys, services


class Command(BaseCommand):
    help = (
        "Write the JWKS of the result-signing keys (public keys only) to FILE, for the public listener "
        "(its GPUFLEET_PUBLIC_JWKS_FILE), which holds no private key. Run it again after a rotation."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="where to write the JWKS (replaced at once)")

    def handle(self, *args, file: str, **options):
        try:
            jwks = services.public_keys()
            published_keys.write(file, jwks)
        except (services.NotConfigured, OSError) as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"wrote {len(jwks['keys'])} public key(s) to {file}")
