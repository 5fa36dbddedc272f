from django.core.management.base import BaseCommand, CommandError

from fleet import firmware_rollouts, rollout_rules
from fleet.models import FirmwareBaseline
from fleet.selectors import rollout_progress


class Command(BaseCommand):
    help = (
        "Roll a firmware baseline out to the available nodes of its class, in batches under a per-pod cap, as the "
        "admin's action does; beat's reconciler sends the batches. Nodes in use get it at their next handoff."
    )

    def add_arguments(self, parser):
        parser.add_argument("baseline", help="The baseline's name, e.g. bmcsim-default")
        parser.add_argument("--batch", type=int, default=rollout_rules.DEFAULT_BATCH_SIZE, help="nodes at once")
        parser.add_argument(
            "--per-pod-cap", type=int, default=rollout_rules.DEFAULT_PER_POD_CAP, help="nodes of one pod at once"
        )

    def handle(self, *args, baseline, batch, per_pod_cap, **options):
        try:
            rollout = firmware_rollouts.start_rollout(
                baseline=FirmwareBaseline.objects.get(name=baseline),
                batch_size=batch,
                per_pod_cap=per_pod_cap,
                actor="operator:roll_out_firmware",
            )
        except FirmwareBaseline.DoesNotExist:
            raise CommandError(f"no firmware baseline is named {baseline!r}") from None
        except (firmware_rollouts.RolloutRefused, rollout_rules.InvalidLimits) as refused:
            raise CommandError(str(refused)) from refused
        self.stdout.write(f"started {rollout}, {rollout.status}: {rollout_progress(rollout)}")
