"""What a tenant's node is reached by, its SSH host key, and a reinstall (its config drive:
fleet/services/credentials.py).
"""

from __future__ import annotations

from django.db import transaction

from fleet import lifecycle
from fleet.models import Image, Node
from fleet.services.transitions import transition


def record_host_key(*, node_id: int, fingerprint: str) -> None:
    Node.objects.filter(pk=node_id, state__in=[s.value for s in lifecycle.SERVING_STATES]).update(
        ssh_host_key_fingerprint=fingerprint
    )


def request_reinstall(*, node_id: int, image: Image | None, actor: str) -> Node:
    """The tenant's reinstall of its active node: provisioned again for the same reservation, its
    drives erased first (a new image on an old disk keeps the old data), with `image` if given,
    else the one it booted. Raises lifecycle.IllegalTransition unless the node is active."""
    with transaction.atomic():
        node = transition(
            node_id=node_id,
            event=lifecycle.Event.REINSTALL_REQUESTED,
            actor=actor,
            reason=f"reinstall with {image.name}" if image else "reinstall",
        )
        if image is not None:
            Node.objects.filter(pk=node_id).update(reinstall_image=image)
    return node
