from django.core.management.base import BaseCommand, CommandError

from console.invariants import CHECKS


class Command(BaseCommand):
    help = (
        "Check what must always hold, over the whole database and audit log; exit non-zero on any "
        "violation. Run it on a settled fleet: a reservation mid-provisioning counts as unsettled."
    )

    def add_arguments(self, parser):
        parser.add_argument("--check", action="append", choices=sorted(CHECKS), help="Only these checks.")

    def handle(self, *args, check, **options):
        found = 0
        for name in check or CHECKS:
            violations = list(CHECKS[name]())
            found += len(violations)
            self.stdout.write(f"{name}: {len(violations)} violation(s)")
            for violation in violations:
                rows = f"  [{', '.join(violation.rows)}]" if violation.rows else ""
                self.stdout.write(f"  - {violation.message}{rows}")
        if found:
            raise CommandError(f"{found} invariant violation(s)")
        self.stdout.write("every invariant holds")
