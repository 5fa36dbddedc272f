"""The image catalogue, imported from a vendor's list."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from fleet.catalogue import ImageRecord
from fleet.models import Image


def import_images(records: Iterable[ImageRecord]) -> tuple[int, int]:
    """Add the catalogue's images and bring known ones (by name) up to date; (added, updated). The
    catalogue's default, if it names one, becomes the only default."""
    added = updated = 0
    with transaction.atomic():
        for record in records:
            fields = {f: getattr(record, f) for f in ("os", "url", "sha256", "boot_mode", "needs_secure_boot")}
            if record.default:
                Image.objects.filter(default=True).exclude(name=record.name).update(default=False)
                fields["default"] = True
            image, created = Image.objects.get_or_create(name=record.name, defaults=fields)
            if created:
                added += 1
            elif any(getattr(image, f) != value for f, value in fields.items()):
                Image.objects.filter(pk=image.pk).update(**fields)
                updated += 1
    return added, updated
