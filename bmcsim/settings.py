"""bmcsim's settings, from the command line and the environment, and the fleet layout they name."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from core.topology import NodeSpec, default_layout

from .releases import QUOTED_PCRS

MAX_NODES = 10_000
MAX_BODY_BYTES = 1024 * 1024  # a request body past this answers 413, on every route
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    host: str
    port: int
    nodes: int
    topology: Path | None
    data_dir: Path
    scale: float
    username: str
    password: str
    # Every agent's /metrics over TLS for Prometheus, to client certificates of the metrics CA only:
    # the port (0: no such listener) and the CA's folder (core/metrics_ca.py), of which bmcsim reads
    # ca.pem, server.pem and server.key. A folder without them: no listener, and a warning.
    agent_tls_port: int = 0
    metrics_ca_dir: Path = REPO_ROOT / "var" / "metrics-ca"
    # Where a tenant node's sshd listens, on the node's own loopback address from its config drive.
    ssh_port: int = 2222
    # The control plane every node's agent reports new XIDs to (its /v1/agents/{node}/xids); "": none.
    control_plane_url: str = ""
    # The SHA-256 PCRs each node's TPM quotes, and whose events its evidence's event log gives. Add
    # 7 to have Secure Boot's measurement in the evidence (and in the reference values).
    quoted_pcrs: tuple[int, ...] = QUOTED_PCRS

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def parse(argv: list[str] | None = None) -> Settings:
    env = os.environ
    parser = _parser(env)
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= MAX_NODES:
        parser.error(f"--nodes must be from 1 to {MAX_NODES}")
    if not 1 <= args.ssh_port <= 65535:
        parser.error("--ssh-port must be from 1 to 65535")
    if not 0 <= args.agent_tls_port <= 65535:
        parser.error("--agent-tls-port must be from 0 (none) to 65535")
    if args.time_scale < 0:
        parser.error("SIM_TIME_SCALE must not be negative")
    control_plane_url = env.get("BMCSIM_CONTROL_PLANE_URL", "").rstrip("/")
    parts = urlsplit(control_plane_url)
    if control_plane_url and (parts.scheme not in ("http", "https") or not parts.hostname):
        parser.error(f"BMCSIM_CONTROL_PLANE_URL {control_plane_url!r} is not an http or https URL")
    return Settings(
        host=args.host,
        port=args.port,
        nodes=args.nodes,
        topology=Path(args.topology) if args.topology else None,
        data_dir=args.data_dir,
        scale=args.time_scale,
        username=env.get("BMCSIM_USERNAME", "root"),
        password=env.get("BMCSIM_PASSWORD", "calvin"),
        agent_tls_port=args.agent_tls_port,
        metrics_ca_dir=args.metrics_ca_dir,
        ssh_port=args.ssh_port,
        control_plane_url=control_plane_url,
        quoted_pcrs=args.quoted_pcrs,
    )


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """The command line, each option's default from its environment variable."""
    parser = argparse.ArgumentParser(
        prog="python -m bmcsim", description="Simulated GPU fleet: Redfish BMCs and node agents."
    )
    parser.add_argument("--host", default=env.get("BMCSIM_HOST", "127.0.0.1"), help="default 127.0.0.1 (BMCSIM_HOST)")
    # String defaults go through `type` too, so a bad environment value is a usage error, not a traceback.
    parser.add_argument("--port", type=int, default=env.get("BMCSIM_PORT", "8100"), help="default 8100 (BMCSIM_PORT)")
    parser.add_argument(
        "--nodes", type=int, default=env.get("BMCSIM_NODES", "50"), help="fleet size, default 50 (BMCSIM_NODES)"
    )
    parser.add_argument(
        "--topology",
        type=Path,
        default=env.get("BMCSIM_TOPOLOGY") or None,
        help='JSON file {"nodes": N, "nodes_per_rack"?, "pods"?, "gpus_per_node"?, "racks_per_leaf"?, '
        '"spine_groups_per_pod"?} for other fleet shapes and fabrics',
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(env.get("BMCSIM_DATA_DIR", REPO_ROOT / "var" / "bmcsim")),
        help="where state, keys and certificates persist, default var/bmcsim (BMCSIM_DATA_DIR)",
    )
    parser.add_argument(
        "--ssh-port",
        type=int,
        default=env.get("BMCSIM_SSH_PORT", "2222"),
        help="the port of tenant nodes' sshd, on each node's address, default 2222 (BMCSIM_SSH_PORT)",
    )
    parser.add_argument(
        "--agent-tls-port",
        type=int,
        default=env.get("BMCSIM_AGENT_TLS_PORT", "8143"),
        help="where Prometheus reads every agent's /metrics over TLS with a client certificate of the "
        "metrics CA, default 8143, 0 for none (BMCSIM_AGENT_TLS_PORT)",
    )
    parser.add_argument(
        "--metrics-ca-dir",
        type=Path,
        default=Path(env.get("BMCSIM_METRICS_CA_DIR", REPO_ROOT / "var" / "metrics-ca")),
        help="the metrics CA's folder (manage.py ensure_metrics_ca DIR makes it): ca.pem, server.pem, "
        "server.key; default var/metrics-ca (BMCSIM_METRICS_CA_DIR)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=env.get("SIM_TIME_SCALE", "1"),
        help="multiplies simulated durations; 0 = instant, default 1 (SIM_TIME_SCALE)",
    )
    parser.add_argument(
        "--quoted-pcrs",
        type=_pcr_list,
        default=env.get("BMCSIM_QUOTED_PCRS", ",".join(map(str, QUOTED_PCRS))),
        help="the PCRs every TPM quotes, default 0,4,8,9; 0,4,7,8,9 adds Secure Boot's (BMCSIM_QUOTED_PCRS)",
    )
    return parser


def _pcr_list(text: str) -> tuple[int, ...]:
    """ "0,4,7,8,9" -> (0, 4, 7, 8, 9): distinct PCR indexes from 0 to 23, at least one."""
    try:
        pcrs = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of PCR indexes") from None
    if not pcrs or not all(0 <= pcr <= 23 for pcr in pcrs):
        raise argparse.ArgumentTypeError(f"{text!r}: PCR indexes go from 0 to 23")
    return pcrs


# A topology file's keys but "nodes", and the default_layout argument each gives.
TOPOLOGY_KEYS = {
    "nodes_per_rack": "nodes_per_rack",
    "pods": "pod_count",
    "gpus_per_node": "gpus_per_node",
    "racks_per_leaf": "racks_per_leaf",
    "spine_groups_per_pod": "spine_groups_per_pod",
}


def layout(settings: Settings) -> list[NodeSpec]:
    """The fleet from core.topology, so the control plane's seed_fleet names the same hardware."""
    if settings.topology is None:
        return default_layout(settings.nodes)
    shape = json.loads(settings.topology.read_text())
    if not isinstance(shape, dict):
        raise ValueError(f"{settings.topology} must hold a JSON object")
    unknown = set(shape) - {"nodes", *TOPOLOGY_KEYS}
    if unknown:
        raise ValueError(f"unknown keys in {settings.topology}: {', '.join(sorted(unknown))}")
    count = shape.get("nodes", settings.nodes)
    if not isinstance(count, int) or not 1 <= count <= MAX_NODES:
        raise ValueError(f"'nodes' in {settings.topology} must be an integer from 1 to {MAX_NODES}")
    kwargs = {argument: shape[key] for key, argument in TOPOLOGY_KEYS.items() if key in shape}
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in kwargs.values()):
        raise ValueError(f"{', '.join(TOPOLOGY_KEYS)} in {settings.topology} must be integers")
    return default_layout(count, **kwargs)
