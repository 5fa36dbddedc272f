from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.text import slugify
from rest_framework.authtoken.models import Token

from reservations.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant (or find it) and print its API token alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")

    @transaction.atomic
    def handle(self, *args, name, **options):
        if slugify(name) != name:
            raise CommandError(f"tenant name {name!r} must be a slug, e.g. {slugify(name) or 'acme'!r}")
        user, _ = get_user_model().objects.get_or_create(username=f"tenant-{name}")
        tenant, created = Tenant.objects.get_or_create(name=name, defaults={"user": user})
        if tenant.user_id is None:
            tenant.user = user
            tenant.save(update_fields=["user"])
        token, _ = Token.objects.get_or_create(user=tenant.user)
        self.stdout.write(f"{'created' if created else 'found'} tenant {name}; its API token:")
        self.stdout.write(token.key)
