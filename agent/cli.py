"""The `gpu-agent` command: serve one node's agent, or prepare its TPM once at install.

    gpu-agent [--backend host|sim] [--listen ADDRESS:PORT] --credentials-file FILE [--xid-report-url URL] [...]
    gpu-agent tpm-create-ak [--tcti TCTI] [--ak-handle HANDLE] [--out FILE]

Every option has an environment variable (GPU_AGENT_*), so a systemd unit or a container can
configure it without a command line; a bad value is a usage error, never a traceback.

The credentials come from the node's config drive (the ISO labelled CIDATA that the control plane
inserts beside each image it boots, the service image's and a tenant's): its `gpu-agent.json`,
{"node", "agent_token", "report_token"}, minted for that boot or tenancy and revoked when it ends.
The image mounts the drive before the agent starts (e.g. `mount -o ro LABEL=CIDATA /run/cidata`)
and runs `gpu-agent --credentials-file /run/cidata/gpu-agent.json`: callers must present its
agent_token, and XID reports carry its report_token. `--token-file` instead takes one token for
both, for an agent run by hand outside the control plane's boots.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import ssl
import sys
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from .app import Served, make_app
from .xid_reports import XidReporter, reporting

DEFAULT_LISTEN = "0.0.0.0:9411"
log = logging.getLogger("gpu-agent")


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"GPU_AGENT_{name}", default)


def _secret(path: str | None, what: str, parser: argparse.ArgumentParser) -> str:
    if not path:
        return ""
    try:
        secret = Path(path).read_text().strip()
    except OSError as error:
        parser.error(f"cannot read the {what} from {path}: {error.strerror}")
    if len(secret) < 16:
        parser.error(f"the {what} in {path} is shorter than 16 characters")
    return secret


def _credentials(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[str, str]:
    """(the token callers must present, the token the agent's XID reports carry)."""
    if args.credentials_file and args.token_file:
        parser.error("--credentials-file and --token-file: give one of them")
    if not args.credentials_file:
        token = _secret(args.token_file, "node token", parser)
        if not token:
            parser.error("the agent needs its credentials: --credentials-file (the config drive's gpu-agent.json)")
        return token, token
    path = args.credentials_file
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        parser.error(f"cannot read the credentials from {path}: {error.strerror}")
    except ValueError:
        parser.error(f"the credentials in {path} are not JSON")
    tokens = [document.get(key) if isinstance(document, dict) else None for key in ("agent_token", "report_token")]
    agent_token, report_token = (token if isinstance(token, str) and len(token) >= 16 else "" for token in tokens)
    if not agent_token or not report_token:
        parser.error(f"{path} needs an agent_token and a report_token of at least 16 characters")
    return agent_token, report_token


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not ADDRESS:PORT")
    return host.strip("[]"), int(port)


def _url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{value!r} is not an http or https URL")
    return value


def _handle(value: str) -> int:
    try:
        return int(value, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TPM handle such as 0x81010002") from None


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-agent", description="The gpu-fleet node agent.")
    parser.add_argument("--backend", choices=("host", "sim"), default=_env("BACKEND", "host"))
    parser.add_argument("--listen", type=_listen, default=_env("LISTEN", DEFAULT_LISTEN), help=DEFAULT_LISTEN)
    parser.add_argument(
        "--credentials-file",
        default=_env("CREDENTIALS_FILE"),
        help="the config drive's gpu-agent.json: this boot's agent and report tokens",
    )
    parser.add_argument("--token-file", default=_env("TOKEN_FILE"), help="instead: one bearer token for both")
    parser.add_argument(
        "--xid-report-url",
        metavar="URL",
        type=_url,
        default=_env("XID_REPORT_URL") or None,  # set but empty: off
        help="report each new XID here at once, with the node's token (the control plane's "
        "/v1/agents/NODE/xids); none by default",
    )
    tls = parser.add_argument_group(
        "TLS (optional; with --client-ca, Prometheus reads /metrics with a certificate that CA issued)"
    )
    tls.add_argument("--tls-cert", default=_env("TLS_CERT"))
    tls.add_argument("--tls-key", default=_env("TLS_KEY"))
    tls.add_argument(
        "--client-ca",
        default=_env("CLIENT_CA"),
        help="the fleet's metrics CA certificate: its client certificates read /metrics, and nothing else "
        "(every other route needs the node's token); a certificate it did not issue is refused",
    )
    host = parser.add_argument_group("host backend")
    host.add_argument("--tcti", default=_env("TCTI", "device:/dev/tpmrm0"), help="the TPM, as tpm2-tools name it")
    host.add_argument("--ak-handle", default=_env("AK_HANDLE", "0x81010002"), help="the persistent attestation key")
    host.add_argument("--ak-cert", default=_env("AK_CERT", "/etc/gpu-agent/ak.pem"), help="its certificate (PEM)")
    host.add_argument(
        "--event-log",
        default=_env("EVENT_LOG", "/sys/kernel/security/tpm0/binary_bios_measurements"),
        help="the measured-boot event log",
    )
    host.add_argument("--kmsg", default=_env("KMSG", "/dev/kmsg"), help="the kernel log XIDs are read from")
    host.add_argument(
        "--boot-medium",
        default=_env("BOOT_MEDIUM"),
        help="the device the node booted its image from (e.g. /dev/sr0), hashed for the control plane's check",
    )
    host.add_argument(
        "--dcgmi",
        metavar="PATH",
        default=_env("DCGMI", "dcgmi"),
        help="DCGM's dcgmi, which runs diagnostics (dcgmi diag); without it, none (default: dcgmi on the PATH)",
    )
    sim = parser.add_argument_group("sim backend (a simulated node without a TPM, to try the agent)")
    sim.add_argument("--name", default=_env("NAME"), help="the node's name, default the host name")
    sim.add_argument("--gpus", type=int, default=_env("GPUS", "8"))
    return parser


def _tls(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ssl.SSLContext | None:
    if not args.tls_cert and not args.client_ca:
        return None
    if not args.tls_cert or not args.tls_key:
        parser.error("--tls-cert and --tls-key go together, and --client-ca needs them")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
        if args.client_ca:
            context.load_verify_locations(args.client_ca)
            # Asked for, and checked when given: the control plane calls with the node's token alone.
            context.verify_mode = ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as error:
        parser.error(f"TLS: {error}")
    return context


def _backend(args: argparse.Namespace, parser: argparse.ArgumentParser):
    if args.backend == "sim":
        from .sim import SimBackend, StandaloneNode

        return SimBackend(StandaloneNode(args.name, args.gpus)), False
    from .host import HostBackend, HostUnusable

    try:
        backend = HostBackend.open(
            tcti=args.tcti,
            ak=args.ak_handle,
            ak_cert=args.ak_cert,
            event_log=args.event_log,
            kmsg=args.kmsg,
            boot_medium=args.boot_medium,
            dcgmi=args.dcgmi,
        )
    except HostUnusable as error:
        parser.error(str(error))
    return backend, True


def serve(argv: list[str]) -> None:
    parser = _serve_parser()
    args = parser.parse_args(argv)
    tls = _tls(args, parser)
    token, report_token = _credentials(args, parser)
    backend, blocking = _backend(args, parser)
    served = Served(backend, token, blocking=blocking)
    app = make_app(served)
    if args.xid_report_url:
        app.cleanup_ctx.append(reporting([XidReporter(backend, args.xid_report_url, report_token)]))
        log.info("reporting new XIDs to %s", args.xid_report_url)
    host, port = args.listen
    log.info("serving %s with the %s backend on %s:%d", backend.hostname(), args.backend, host, port)
    web.run_app(app, host=host, port=port, ssl_context=tls, access_log=None, print=None)


def tpm_create_ak(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="gpu-agent tpm-create-ak",
        description="Create the node's attestation key in its TPM, once, and write its public key "
        "for the operator's CA to certify (the certificate goes to --ak-cert).",
    )
    parser.add_argument("--tcti", default=_env("TCTI", "device:/dev/tpmrm0"))
    parser.add_argument("--ak-handle", type=_handle, default=_env("AK_HANDLE", "0x81010002"))
    parser.add_argument("--out", default="-", help="where the AK's public key (PEM) goes, default standard output")
    args = parser.parse_args(argv)
    from .host.tpm import TPMError, create_attestation_key

    try:
        pem = create_attestation_key(tcti=args.tcti, handle=args.ak_handle)
    except (TPMError, ValueError) as error:
        parser.exit(1, f"gpu-agent tpm-create-ak: {error}\n")
    if args.out == "-":
        sys.stdout.write(pem)
    else:
        Path(args.out).write_text(pem)


COMMANDS = {"tpm-create-ak": tpm_create_ak}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if argv and argv[0] in COMMANDS:
        COMMANDS[argv[0]](argv[1:])
    else:
        serve(argv)
