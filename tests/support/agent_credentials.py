"""What a node's OS is given, read as the node reads it: the config drive fetched from the route its
BMC fetches it from, and the agent's gpu-agent.json on it."""

from __future__ import annotations

import io
import json

import pycdlib
from django.conf import settings
from django.test import Client

from fleet import agent_credentials, leases, lifecycle, services
from fleet.models import CredentialHolder, Node, NodeCredential


def drive_files(iso: bytes) -> dict[str, str]:
    """Every file of a config drive, by the name Linux shows."""
    image = pycdlib.PyCdlib()
    image.open_fp(io.BytesIO(iso))
    files = {}
    for child in image.list_children(rr_path="/"):
        name = child.rock_ridge.name().decode()
        if name in (".", "..") or child.is_dir():
            continue
        out = io.BytesIO()
        image.get_file_from_iso_fp(out, rr_path=f"/{name}")
        files[name] = out.getvalue().decode()
    image.close()
    return files


def fetch_drive(token: str) -> dict[str, str]:
    """The drive at its URL, as the BMC fetches it; its files."""
    answer = Client().get(f"/v1/config-drives/{token}")
    assert answer.status_code == 200, answer.content
    return drive_files(answer.content)


def secrets_of(files: dict[str, str]) -> dict[str, str]:
    return json.loads(files["gpu-agent.json"])


def boot_service_image(node: Node) -> tuple[str, dict[str, str]]:
    """What boot_service_image does to the node's credentials (under a lease of its own); the new
    drive's token and the secrets on it."""
    (lease,) = leases.claim(owner="test-worker", states=[lifecycle.State(node.state)], node_ids=[node.pk])
    token = services.start_service_boot(lease=lease, actor="test-worker", files={"meta-data": "", "user-data": ""})
    leases.release(lease)
    return token, secrets_of(fetch_drive(token))


def tenancy_drive(node: Node) -> tuple[str, dict[str, str]]:
    """The serving node's tenancy drive, as prepare_config_drive makes it; its token and secrets."""
    token = services.tenancy_drive_token(node_id=node.pk, files=lambda: {"meta-data": "", "user-data": ""})
    return token, secrets_of(fetch_drive(token))


def report_token(node: Node) -> str:
    """The report token of the node's live credential (its service boot's, else its tenancy's), as
    its agent holds it; a service boot's is minted first if it has none."""
    live = {c.holder: c for c in NodeCredential.objects.filter(node_id=node.pk, revoked_at=None)}
    credential = live.get(CredentialHolder.BOOT) or live.get(CredentialHolder.TENANCY)
    if credential is None:
        return boot_service_image(node)[1]["report_token"]
    return agent_credentials.agent_secrets(settings.SECRET_KEY, node_id=node.pk, nonce=credential.nonce).report_token
