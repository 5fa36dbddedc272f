import os

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Create the operator account for the admin if it is missing: user GPUFLEET_OPERATOR (default admin), "
        "password GPUFLEET_OPERATOR_PASSWORD (default admin, for the demo only)."
    )

    def handle(self, *args, **options):
        username = os.environ.get("GPUFLEET_OPERATOR", "admin")
        password = os.environ.get("GPUFLEET_OPERATOR_PASSWORD", settings.DEMO_OPERATOR_PASSWORD)
        User = get_user_model()
        if User.objects.filter(username=username).exists():
            self.stdout.write(f"operator {username} exists")
            return
        User.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(f"created operator {username} (password from GPUFLEET_OPERATOR_PASSWORD)")
