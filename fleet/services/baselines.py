"""Firmware baselines, and each node's firmware check against its class's."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from fleet import firmware
from fleet.models import AuditOnlyEvent, FirmwareBaseline, FirmwareBaselineComponent, Node
from fleet.services.transitions import audit_only


def set_firmware_baselines(baselines: Iterable[firmware.Baseline]) -> tuple[int, int]:
    """Make each the baseline of its node class (its GPU model), replacing the class's old one
    whole; (added, replaced). IntegrityError if a name is another class's baseline's."""
    added = replaced = 0
    with transaction.atomic():
        for baseline in baselines:
            row, created = FirmwareBaseline.objects.update_or_create(
                gpu_model=baseline.gpu_model,
                defaults={
                    "name": baseline.name,
                    "bios_attributes": dict(baseline.bios_attributes),
                    "secure_boot_required": baseline.secure_boot_required,
                    "boot_releases": list(baseline.boot_releases),
                },
            )
            row.components.all().delete()
            FirmwareBaselineComponent.objects.bulk_create(
                FirmwareBaselineComponent(
                    baseline=row, component=name, version=expected.version, sha256=expected.sha256, image=expected.image
                )
                for name, expected in baseline.components.items()
            )
            if created:
                added += 1
            else:
                replaced += 1
    return added, replaced


def record_firmware_check(*, node: Node, actor: str, baseline: str, found: firmware.Found, repaired: list[str]) -> None:
    """Audit that the node runs its baseline: what it runs, and what this inspection repaired to get
    there. Attestation signs it into the node's result (selectors.firmware_checked_in_this_state)."""
    reason = f"matches baseline {baseline}" + (f" after repairing {', '.join(repaired)}" if repaired else "")
    detail = {"baseline": baseline, **found.facts(), "repaired": repaired}
    audit_only(node, AuditOnlyEvent.FIRMWARE_CHECKED, actor=actor, reason=reason, detail=detail).save()
