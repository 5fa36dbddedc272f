import json
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from core.outbound import OutboundError
from core.sources import read_url
from core.topology import DEFAULT_NODE_COUNT, default_layout
from fleet.bmc_access import BMCAddressRefused
from fleet.inventory import InventoryError, parse_csv_inventory, parse_inventory, records_from_layout
from fleet.services import FabricEndTaken, FabricLevelsChanged, enrol_nodes

PROGRESS_FROM_NODES = 500
# An inventory lists a whole fleet: bmcsim's is about 1.8 KiB a node (18 MB for 10,000 nodes),
# over the cap of an answer from elsewhere (GPUFLEET_OUTBOUND_MAX_BODY_BYTES); the operator named
# the URL, and 100,000 nodes fit in this.
INVENTORY_MAX_BYTES = 512 * 1024 * 1024


class Command(BaseCommand):
    help = (
        "Enrol the fleet: from bmcsim's inventory (GET {BMCSIM_URL}/bmcsim/v1/inventory), from an "
        "inventory file (--inventory, JSON of that shape or CSV), or with --topology default from the "
        "default layout without asking bmcsim. Idempotent."
    )

    def add_arguments(self, parser):
        parser.add_argument("--topology", choices=["inventory", "default"], default="inventory")
        parser.add_argument("--nodes", type=int, default=DEFAULT_NODE_COUNT, help="Fleet size with --topology default.")
        parser.add_argument("--bmcsim-url", default=settings.BMCSIM_URL)
        parser.add_argument(
            "--inventory",
            type=Path,
            metavar="FILE",
            help="A JSON file in bmcsim's inventory shape, or a CSV file (.csv) with the columns "
            "fleet/inventory.py names: real servers, enrolled without bmcsim.",
        )
        parser.add_argument(
            "--wait", type=float, default=0, metavar="SECONDS", help="Wait this long for bmcsim to come up."
        )

    def handle(self, *args, topology, nodes, bmcsim_url, wait, inventory, verbosity, **options):
        if inventory is not None:
            records = self.read_inventory_file(inventory)
        elif topology == "default":
            if not 1 <= nodes <= 100_000:
                raise CommandError("--nodes must be between 1 and 100000")
            records = records_from_layout(default_layout(nodes), bmcsim_url)
        else:
            records = self.fetch_inventory(bmcsim_url, wait)
        show_progress = verbosity > 0 and len(records) >= PROGRESS_FROM_NODES
        try:
            with tqdm(total=len(records), desc="enrolling", unit="node", disable=not show_progress) as bar:
                result = enrol_nodes(records=records, actor="operator:seed_fleet", progress=bar.update)
        except (BMCAddressRefused, FabricLevelsChanged, FabricEndTaken) as exc:
            raise CommandError(f"nothing enrolled: {exc}") from exc
        self.stdout.write(
            f"fleet of {len(records)} nodes: {result.created} enrolled, {result.updated} updated, "
            f"{len(records) - result.created - result.updated} unchanged"
        )

    def fetch_inventory(self, bmcsim_url: str, wait: float):
        url = f"{bmcsim_url.rstrip('/')}/bmcsim/v1/inventory"
        deadline = time.monotonic() + wait
        while True:
            try:
                return self.read_inventory(url)
            except CommandError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def read_inventory_file(self, path: Path):
        try:
            text = path.read_text()
            if path.suffix.lower() == ".csv":
                return parse_csv_inventory(text)
            return parse_inventory(json.loads(text))
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        except (ValueError, InventoryError) as exc:
            raise CommandError(f"the inventory in {path} is not usable: {exc}") from exc

    def read_inventory(self, url: str):
        try:
            return parse_inventory(read_url(url, max_body_bytes=INVENTORY_MAX_BYTES))
        except (ValueError, InventoryError) as exc:
            raise CommandError(f"the inventory at {url} is not usable: {exc}") from exc
        except OutboundError as exc:
            raise CommandError(
                f"cannot read the inventory at {url} ({exc.reason}); start bmcsim, or use --topology default"
            ) from exc
