from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.text import slugify

from reservations import access
from reservations.models import Tenant
from reservations.services import api_keys, members


class Command(BaseCommand):
    help = (
        "Create an organisation (or find it), make USERNAME its admin with --admin, and print a new "
        "organisation key alone on the last line: a new one each run, never an earlier one (only "
        "their digests are kept)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--admin", metavar="USERNAME", help="a user (made if new) to be the organisation's admin")

    @transaction.atomic
    def handle(self, *args, name, admin, **options):
        if slugify(name) != name:
            raise CommandError(f"tenant name {name!r} must be a slug, e.g. {slugify(name) or 'acme'!r}")
        tenant, created = Tenant.objects.get_or_create(name=name)
        if admin:
            user, _ = get_user_model().objects.get_or_create(username=admin)
            members.add_member(tenant=tenant, user=user, role=access.Role.ADMIN)
        issued = api_keys.issue_key(tenant=tenant, name="made by manage.py create_tenant", organisation_key=True)
        self.stdout.write(
            f"{'created' if created else 'found'} tenant {name}"
            f"{f' with admin {admin}' if admin else ''}; a new organisation key ({issued.api_key.prefix}):"
        )
        self.stdout.write(issued.key)
