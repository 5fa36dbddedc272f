from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from fleet.models import Pod
from fleet.services import add_address_pool


class Command(BaseCommand):
    help = "Give a pod a pool of tenant-network addresses (IPv4 or IPv6 CIDR); idempotent."

    def add_arguments(self, parser):
        parser.add_argument("pod")
        parser.add_argument("network", help="e.g. 10.100.1.0/24 or fd00:100:1::/64")
        parser.add_argument("--gateway", default=None)
        parser.add_argument("--ssh-port", type=int, default=22, help="where tenants reach their nodes' SSH")

    def handle(self, *args, pod, network, gateway, ssh_port, **options):
        try:
            added = add_address_pool(pod=pod, network=network, gateway=gateway, ssh_port=ssh_port)
        except Pod.DoesNotExist:
            raise CommandError(f"no pod named {pod!r}: enrol the fleet first (seed_fleet)") from None
        except ValidationError as error:
            raise CommandError("; ".join(f"{k}: {' '.join(m)}" for k, m in error.message_dict.items())) from None
        self.stdout.write(f"pool {network} {'added to' if added else 'already in'} pod {pod}")
