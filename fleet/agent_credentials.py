"""A node's agent credentials: the two secrets a config drive gives its OS, derived, never stored.

Each credential (fleet/models/node_credentials.py) belongs to one holder for one period: a boot
of the service image (inspection, wipe, idle diagnostics) or a tenancy. It opens two directions,
each with a secret of its own:

- the report token, which the node's agent presents on its XID reports (node -> control plane);
- the agent token, which the control plane presents to the node's agent (control plane -> node).

Both are HMAC-SHA256 of the direction, the node and a random nonce kept in the credential's row,
under a key derived from the control plane's SECRET_KEY: any worker can present the agent token,
and the drive can be served again (a BMC fetches it more than once), while the database holds
neither secret, only the report token's SHA-256, by which a report finds its credential. Nothing
is derived from a node's name alone: without the row's nonce and the key there is nothing to compute.

The drive carries them in `gpu-agent.json` beside cloud-init's files (fleet/nocloud.py):
{"node": NAME, "agent_token": ..., "report_token": ...}; gpu-agent reads it with --credentials-file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

DRIVE_FILE = "gpu-agent.json"
_KEY_CONTEXT = b"gpu-fleet node agent credentials v1"
AGENT = "agent"  # control plane -> node
REPORT = "report"  # node -> control plane


def new_nonce() -> str:
    return secrets.token_hex(16)


def _derive(secret_key: str, direction: str, node_id: int, nonce: str) -> str:
    key = hmac.new(secret_key.encode(), _KEY_CONTEXT, hashlib.sha256).digest()
    mac = hmac.new(key, f"{direction}:{node_id}:{nonce}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def digest(secret: str) -> str:
    """What the database keeps of a secret: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class AgentSecrets:
    agent_token: str
    report_token: str

    def drive_file(self, node: str) -> str:
        """gpu-agent.json as the node's drive carries it."""
        document = {"node": node, "agent_token": self.agent_token, "report_token": self.report_token}
        return json.dumps(document, indent=2) + "\n"


def agent_secrets(secret_key: str, *, node_id: int, nonce: str) -> AgentSecrets:
    return AgentSecrets(
        agent_token=_derive(secret_key, AGENT, node_id, nonce),
        report_token=_derive(secret_key, REPORT, node_id, nonce),
    )
