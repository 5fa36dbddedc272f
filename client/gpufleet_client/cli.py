"""`gpufleet`: the tenants' command line for a gpu-fleet control plane (see client/README.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from gpufleet_client import __version__
from gpufleet_client import offline_verification as verification
from gpufleet_client.api import ApiError, Client
from gpufleet_client.config import Config, ConfigError, load
from gpufleet_client.tables import cell_text, fields, table, timestamp, when

OK, REFUSED, USAGE, NOT_FOUND, UNREACHABLE = 0, 1, 2, 3, 4
INTERRUPTED = 130
WAIT_TIMEOUT_SECONDS = 1800.0
WAIT_INTERVAL_SECONDS = 5.0
GIVEN_UP = {"releasing", "released", "failed"}  # a reservation in these will never become active

EXIT_CODES = """\
exit status:
  0  done
  1  refused by the server (409 conflict, 403 over quota, 400 bad value, ...), the detail on
     stderr; or, with reserve --wait, the reservation failed or was not active in time
  2  usage error, or no token / a bad config file
  3  not found (404): no such reservation or webhook
  4  the server could not be reached, or failed (5xx)
  verify: 0 genuine and affirming, 1 not genuine or not as asked (another node, nonce, too
  old; or no result for the node), 3 genuine but contraindicated, 4 server unreachable

configuration: GPUFLEET_URL (default http://127.0.0.1:8000) and GPUFLEET_TOKEN, else `url` and
`token` in $XDG_CONFIG_HOME/gpufleet/config.toml (~/.config/gpufleet/config.toml).
"""


class Failed(Exception):
    """A command ends with this status, having said why on stderr."""

    def __init__(self, status: int, message: str = ""):
        super().__init__(message)
        self.status = status
        self.message = message


# -- arguments ----------------------------------------------------------------------------


def moment(text: str) -> datetime:
    """An ISO 8601 time; without a zone, this machine's local time."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time such as 2026-12-01T09:00Z") from None
    return value if value.tzinfo is not None else value.astimezone()


def positive_number(unit: str) -> Callable[[str], float]:
    """An argparse type: a finite number above zero, of `unit` (named in the error)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of {unit}")
        return value

    return parse


hours = positive_number("hours")
wait_seconds = positive_number("seconds")


def attribute(text: str) -> tuple[str, str]:
    """NAME=VALUE, a node attribute the operators define."""
    name, equals, value = text.partition("=")
    if not (name and equals and value):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE, such as nic=cx7")
    return name, value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def build_parser() -> argparse.ArgumentParser:
    # --json on every command, wherever it is written: SUPPRESS keeps a sub-command's default
    # from overwriting a --json given before it.
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the server's JSON answer as is"
    )
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Reserve and use bare-metal GPU nodes of a gpu-fleet control plane.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[output],
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    command = _adder(parser.add_subparsers(title="commands", metavar="COMMAND"), output)

    _reserve_arguments(command("reserve", do_reserve, "reserve nodes"))
    command("list", do_list, "list your reservations, newest first")
    show = command("show", do_show, "show a reservation and its machines")
    show.add_argument("id", type=positive_int, metavar="ID")
    _extend_arguments(command("extend", do_extend, "move a reservation's end (later or earlier), or change its nodes"))
    release = command("release", do_release, "release a reservation: its nodes are wiped and given back")
    release.add_argument("id", type=positive_int, metavar="ID")
    command("capacity", do_capacity, "free nodes per pod (needs no token)")
    command("quota", do_quota, "what you may hold, and hold now")
    usage = command("usage", do_usage, "node time used, per reservation")
    usage.add_argument("--from", dest="start", type=moment, metavar="TIME", help="from this time (ISO 8601)")
    usage.add_argument("--to", dest="end", type=moment, metavar="TIME", help="to this time (ISO 8601)")
    hooks = command("webhooks", do_webhooks, "list your webhooks; add, delete, and look at their deliveries")
    _webhook_commands(_adder(hooks.add_subparsers(title="webhook commands", metavar="COMMAND"), output))
    _verify_arguments(
        command(
            "verify",
            do_verify,
            "fetch a node's signed attestation result and the signing keys, and verify the result here",
        )
    )
    return parser


def _adder(commands, output: argparse.ArgumentParser) -> Callable[..., argparse.ArgumentParser]:
    """A function that adds a command with its handler and help, and --json, to `commands`."""

    def command(name: str, handler: Callable, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help, parents=[output])
        sub.set_defaults(handler=handler)
        return sub

    return command


def _reserve_arguments(reserve: argparse.ArgumentParser) -> None:
    reserve.add_argument("--nodes", type=positive_int, required=True, metavar="N", help="how many nodes")
    reserve.add_argument("--pod", help="in this pod (default: where they fit best)")
    reserve.add_argument("--rack-scale", action="store_true", help="whole racks (NVLink domains) only")
    reserve.add_argument("--required", metavar="LEVEL", help="every node in one domain of this fabric level")
    reserve.add_argument("--preferred", metavar="LEVEL", help="span as few domains of this level as can be, e.g. leaf")
    reserve.add_argument("--whole", metavar="LEVEL", help="whole domains of this level only")
    reserve.add_argument("--gpu-model", metavar="MODEL", help="nodes with this GPU model only")
    reserve.add_argument(
        "--attribute",
        type=attribute,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="nodes with this attribute only (repeatable)",
    )
    reserve.add_argument("--starts-at", type=moment, metavar="TIME", help="ISO 8601 (default now)")
    end = reserve.add_mutually_exclusive_group()
    end.add_argument("--ends-at", type=moment, metavar="TIME", help="ISO 8601 (default: the longest allowed)")
    end.add_argument("--hours", type=hours, metavar="H", help="end H hours after the start")
    reserve.add_argument("--image", help="an image of the catalogue (default: its default image)")
    reserve.add_argument(
        "--ssh-key", type=positive_int, action="append", default=[], metavar="ID", help="an SSH key id (repeatable)"
    )
    reserve.add_argument("--user-data-file", metavar="FILE", help="cloud-init user data ('-': stdin)")
    reserve.add_argument(
        "--wait-for-capacity", action="store_true", help="if the nodes are not free, queue the request until they are"
    )
    reserve.add_argument("--wait", action="store_true", help="wait until the reservation is active, progress on stderr")
    reserve.add_argument(
        "--timeout", type=wait_seconds, default=WAIT_TIMEOUT_SECONDS, metavar="SECONDS", help="how long --wait waits"
    )
    reserve.add_argument(
        "--interval", type=wait_seconds, default=WAIT_INTERVAL_SECONDS, metavar="SECONDS", help="how often --wait looks"
    )


def _extend_arguments(extend: argparse.ArgumentParser) -> None:
    extend.add_argument("id", type=positive_int, metavar="ID")
    new_end = extend.add_mutually_exclusive_group()
    new_end.add_argument("--ends-at", type=moment, metavar="TIME", help="the new end, ISO 8601")
    new_end.add_argument("--hours", type=hours, metavar="H", help="end H hours later than it does now")
    extend.add_argument("--nodes", type=positive_int, metavar="N", help="hold N nodes from now on")
    extend.add_argument("--release", nargs="+", default=[], metavar="NAME", help="give back these nodes")


def _webhook_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    add = command("add", do_add_webhook, "add a webhook; its signing secret is shown this once")
    add.add_argument("url", metavar="URL")
    add.add_argument(
        "--event", action="append", required=True, metavar="EVENT", help="e.g. reservation.active (repeatable)"
    )
    delete = command("delete", do_delete_webhook, "delete a webhook")
    delete.add_argument("id", type=positive_int, metavar="ID")
    deliveries = command("deliveries", do_deliveries, "what was sent to a webhook, newest first")
    deliveries.add_argument("id", type=positive_int, metavar="ID")
    redeliver = command("redeliver", do_redeliver, "send a delivery again now")
    redeliver.add_argument("id", type=positive_int, metavar="ID")
    redeliver.add_argument("delivery", type=positive_int, metavar="DELIVERY")


def _verify_arguments(verify: argparse.ArgumentParser) -> None:
    verify.add_argument("node", metavar="NODE")
    verify.add_argument(
        "--nonce", type=verification.nonce_readings, help="refuse a result for another nonce (base64url or hex)"
    )
    verify.add_argument(
        "--max-age", type=verification.seconds, metavar="SECONDS", help="refuse a result signed longer ago"
    )
    verify.add_argument(
        "--allow-contraindicated", action="store_true", help="exit 0 on a genuine contraindicated result too"
    )


# -- running ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version (0), or a usage error (2), already printed
        return stop.code if isinstance(stop.code, int) else USAGE
    if not hasattr(args, "handler"):
        parser.print_help(sys.stderr)
        return USAGE
    args.json = getattr(args, "json", False)
    try:
        return args.handler(args, load()) or OK
    except ConfigError as error:
        print(f"gpufleet: {error}", file=sys.stderr)
        return USAGE
    except ApiError as error:
        return refused(error, args)
    except Failed as failed:
        if failed.message:
            print(f"gpufleet: {failed.message}", file=sys.stderr)
        return failed.status
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `gpufleet list | head`
        sys.stderr.close()
        return OK


def exit_status(error: ApiError) -> int:
    if error.status is None or error.status >= 500:
        return UNREACHABLE
    if error.status == 404:
        return NOT_FOUND
    return REFUSED


def refused(error: ApiError, args: argparse.Namespace) -> int:
    """Say what the server refused, on stderr (and its JSON answer on stdout, with --json)."""
    if args.json and error.body is not None:
        emit_json(error.body)
    where = f" ({error.status})" if error.status else ""
    print(f"gpufleet: {error.detail}{where}", file=sys.stderr)
    offer = error.body.get("offer") if isinstance(error.body, dict) else None
    if isinstance(offer, dict):
        print(
            f"earliest fit: {when(offer.get('starts_at'))} to {when(offer.get('ends_at'))} in {offer.get('pod')}; "
            "rerun with --wait-for-capacity to queue it",
            file=sys.stderr,
        )
    return exit_status(error)


def client(config: Config, *, token: bool = True) -> Client:
    return Client(config.url, config.require_token() if token else config.token)


def emit_json(document: Any) -> None:
    print(json.dumps(document, indent=2))


def iso(value: datetime) -> str:
    return value.isoformat()


# -- reservations --------------------------------------------------------------------------


def do_reserve(args, config: Config) -> int:
    wanted: dict[str, Any] = {"node_count": args.nodes}
    if args.pod:
        wanted["pod"] = args.pod
    if args.rack_scale:
        wanted["rack_scale"] = True
    topology = {key: level for key, level in (("required", args.required), ("preferred", args.preferred)) if level}
    if topology:
        wanted["topology"] = topology
    if args.whole:
        wanted["whole"] = args.whole
    if args.gpu_model:
        wanted["gpu_model"] = args.gpu_model
    if args.attribute:
        wanted["attributes"] = dict(args.attribute)
    if args.starts_at:
        wanted["starts_at"] = iso(args.starts_at)
    if args.ends_at:
        wanted["ends_at"] = iso(args.ends_at)
    elif args.hours:
        wanted["ends_at"] = iso((args.starts_at or datetime.now().astimezone()) + timedelta(hours=args.hours))
    if args.image:
        wanted["image"] = args.image
    if args.ssh_key:
        wanted["ssh_keys"] = args.ssh_key
    if args.user_data_file:
        wanted["user_data"] = read_user_data(args.user_data_file)
    if args.wait_for_capacity:
        wanted["wait"] = True
    api = client(config)
    reservation = api.reserve(wanted)
    if args.wait:
        reservation = wait_until_active(api, reservation, timeout=args.timeout, interval=args.interval)
    return print_reservation(reservation, args)


def read_user_data(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise Failed(USAGE, f"--user-data-file {path}: {getattr(error, 'strerror', None) or error}") from None


def wait_until_active(api: Client, reservation: dict, *, timeout: float, interval: float) -> dict:
    """Poll the reservation until it is active; its progress on stderr, a line each time it changes."""
    deadline = time.monotonic() + timeout
    said = None
    while True:
        progress = f"reservation {reservation['id']}: {reservation['state']}, {nodes_up(reservation)} nodes up"
        if progress != said:
            print(progress, file=sys.stderr, flush=True)
            said = progress
        if reservation["state"] == "active":
            return reservation
        if reservation["state"] in GIVEN_UP:
            reason = f": {reservation['reason']}" if reservation.get("reason") else ""
            raise Failed(REFUSED, f"reservation {reservation['id']} is {reservation['state']}{reason}")
        if time.monotonic() >= deadline:
            raise Failed(
                REFUSED,
                f"reservation {reservation['id']} is not active after {timeout:g} s ({progress.split(': ', 1)[1]}); "
                f"it is kept: `gpufleet release {reservation['id']}` gives it back",
            )
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
        try:
            reservation = api.reservation(reservation["id"])
        except ApiError as error:
            if exit_status(error) != UNREACHABLE:
                raise
            print(f"gpufleet: {error.detail}; trying again", file=sys.stderr, flush=True)


def nodes_up(reservation: dict) -> str:
    up = sum(1 for machine in reservation.get("machines") or [] if machine.get("state") == "active")
    return f"{up}/{reservation.get('node_count', '?')}"


def do_list(args, config: Config) -> int:
    page = client(config).reservations()
    if args.json:
        emit_json(page)
        return OK
    rows = [
        (
            r["id"],
            r["state"],
            r["node_count"],
            r.get("pod"),
            when(r.get("starts_at")),
            when(r.get("ends_at")),
            r.get("image"),
        )
        for r in page.get("results", [])
    ]
    if rows:
        print(table(("ID", "STATE", "NODES", "POD", "STARTS", "ENDS", "IMAGE"), rows))
    else:
        print("no reservations", file=sys.stderr)
    return OK


def do_show(args, config: Config) -> int:
    return print_reservation(client(config).reservation(args.id), args)


def do_extend(args, config: Config) -> int:
    if not (args.ends_at or args.hours or args.nodes or args.release):
        raise Failed(USAGE, "extend: say what to change: --ends-at TIME or --hours H, --nodes N, --release NAME...")
    api = client(config)
    changes: dict[str, Any] = {}
    if args.ends_at:
        changes["ends_at"] = iso(args.ends_at)
    elif args.hours:
        current = api.reservation(args.id)
        changes["ends_at"] = iso(datetime.fromisoformat(current["ends_at"]) + timedelta(hours=args.hours))
    if args.nodes:
        changes["node_count"] = args.nodes
    if args.release:
        changes["release_nodes"] = args.release
    return print_reservation(api.change(args.id, changes), args)


def do_release(args, config: Config) -> int:
    return print_reservation(client(config).release(args.id), args)


def print_reservation(reservation: dict, args) -> int:
    if args.json:
        emit_json(reservation)
    else:
        print(reservation_details(reservation))
    return OK


def levels(topology: dict | None) -> str | None:
    """'required pod, preferred leaf'; None when nothing beyond the default was asked."""
    topology = topology or {}
    said = [f"{key} {topology[key]}" for key in ("required", "preferred") if topology.get(key)]
    return None if said in ([], ["required pod"]) else ", ".join(said)


def reservation_details(reservation: dict) -> str:
    summary = fields(
        [
            ("id", reservation.get("id")),
            ("state", reservation.get("state")),
            ("nodes", f"{nodes_up(reservation)} up"),
            ("pod", reservation.get("pod")),
            ("rack scale", reservation.get("rack_scale")),
            ("placed in", reservation.get("placed_in")),
            ("topology", levels(reservation.get("topology"))),
            ("whole", reservation.get("whole")),
            ("gpu model", reservation.get("gpu_model")),
            ("attributes", ", ".join(f"{k}={v}" for k, v in (reservation.get("attributes") or {}).items()) or None),
            ("image", reservation.get("image")),
            ("starts", when(reservation.get("starts_at"))),
            ("ends", when(reservation.get("ends_at"))),
            ("ssh keys", reservation.get("ssh_keys")),
            ("reason", reservation.get("reason")),
        ]
    )
    machines = reservation.get("machines") or []
    if not machines:
        return summary
    rows = [
        (m.get("name"), m.get("state"), m.get("address"), m.get("ssh_port"), m.get("host_key_fingerprint"))
        for m in machines
    ]
    return summary + "\n\n" + table(("NODE", "STATE", "ADDRESS", "SSH PORT", "HOST KEY"), rows)


# -- the fleet and the account -------------------------------------------------------------


def do_capacity(args, config: Config) -> int:
    answer = client(config, token=False).capacity()
    if args.json:
        emit_json(answer)
        return OK
    rows = [
        (p["name"], p["nodes"], p["available"], p.get("free_open_ended"), p.get("whole_free_racks"))
        for p in answer.get("pods", [])
    ]
    print(table(("POD", "NODES", "FREE", "FREE OPEN-ENDED", "WHOLE FREE RACKS"), rows))
    domains = [row for p in answer.get("pods", []) for row in domain_rows(p.get("domains") or [], depth=1)]
    if domains:
        print()
        print(table(("DOMAIN", "LEVEL", "NODES", "FREE"), domains))
    return OK


def domain_rows(domains: list[dict], *, depth: int) -> list[tuple]:
    """The fabric's domains down to the level above the racks, each indented under its parent."""
    rows = []
    for domain in domains:
        children = domain.get("children") or []
        if not children:  # a rack: the pods' table counts them already
            continue
        rows.append(
            ("  " * depth + str(domain.get("name")), domain.get("level"), domain.get("nodes"), domain.get("available"))
        )
        rows += domain_rows(children, depth=depth + 1)
    return rows


def do_quota(args, config: Config) -> int:
    answer = client(config).quota()
    if args.json:
        emit_json(answer)
        return OK
    limits, used = answer.get("limits") or {}, answer.get("used") or {}
    names = [*limits, *(name for name in used if name not in limits)]
    rows = [(name, per_pod(limits.get(name), name in limits), per_pod(used.get(name), name in used)) for name in names]
    print(table(("", "LIMIT", "USED"), rows))
    return OK


def per_pod(value: Any, given: bool) -> str:
    """A quota value: a number, none (no limit), or per pod."""
    if not given:
        return "-"
    if value is None:
        return "none"
    if isinstance(value, dict):
        return ", ".join(f"{pod}: {count}" for pod, count in value.items()) or "0"
    return cell_text(value)


def do_usage(args, config: Config) -> int:
    answer = client(config).usage(start=args.start and iso(args.start), end=args.end and iso(args.end))
    if args.json:
        emit_json(answer)
        return OK
    results, total = answer.get("results") or [], answer.get("total") or {}
    numeric = []
    for row in [*results, total]:
        numeric += [
            key for key, value in row.items() if is_number(value) and key != "reservation" and key not in numeric
        ]
    rows = [(row.get("reservation"), *(row.get(key) for key in numeric)) for row in results]
    rows.append(("total", *(total.get(key) for key in numeric)))
    print(table(("RESERVATION", *(key.upper() for key in numeric)), rows))
    return OK


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- webhooks -----------------------------------------------------------------------------


def do_webhooks(args, config: Config) -> int:
    page = client(config).webhooks()
    if args.json:
        emit_json(page)
        return OK
    rows = [
        (h["id"], h["url"], ", ".join(h.get("events", [])), when(h.get("created_at"))) for h in page.get("results", [])
    ]
    if rows:
        print(table(("ID", "URL", "EVENTS", "CREATED"), rows))
    else:
        print("no webhooks", file=sys.stderr)
    return OK


def do_add_webhook(args, config: Config) -> int:
    hook = client(config).add_webhook(args.url, args.event)
    if args.json:
        emit_json(hook)
        return OK
    print(
        fields([("id", hook["id"]), ("url", hook["url"]), ("events", hook.get("events")), ("secret", hook["secret"])])
    )
    print("the secret is shown only now: keep it to check the signature of every delivery", file=sys.stderr)
    return OK


def do_delete_webhook(args, config: Config) -> int:
    client(config).delete_webhook(args.id)
    if not args.json:
        print(f"webhook {args.id} deleted")
    return OK


def do_deliveries(args, config: Config) -> int:
    page = client(config).deliveries(args.id)
    if args.json:
        emit_json(page)
        return OK
    rows = [
        (
            d["id"],
            d.get("event"),
            d.get("state"),
            d.get("attempts"),
            d.get("last_status") or d.get("last_error"),
            when(d.get("created_at")),
            when(d.get("delivered_at")),
        )
        for d in page.get("results", [])
    ]
    if rows:
        print(table(("ID", "EVENT", "STATE", "ATTEMPTS", "LAST ANSWER", "CREATED", "DELIVERED"), rows))
    else:
        print(f"nothing sent to webhook {args.id} yet", file=sys.stderr)
    return OK


def do_redeliver(args, config: Config) -> int:
    delivery = client(config).redeliver(args.id, args.delivery)
    if args.json:
        emit_json(delivery)
        return OK
    print(f"delivery {delivery['id']} ({delivery.get('event')}) will be sent again now: {delivery.get('state')}")
    return OK


# -- attestation ---------------------------------------------------------------------------


def do_verify(args, config: Config) -> int:
    api = client(config, token=False)
    try:
        answer = api.attestation(args.node)
        keys = api.signing_keys()
    except ApiError as error:
        if exit_status(error) == UNREACHABLE:
            raise
        refused(error, args)
        return verification.REFUSED  # no result to vouch for the node: not 3, which means contraindicated
    checked = verification.check_result(
        str(answer.get("token", "")),
        keys,
        node=args.node,
        nonce=args.nonce,
        max_age=args.max_age,
        allow_contraindicated=args.allow_contraindicated,
        now=time.time(),
    )
    if args.json:
        emit_json(answer)
    else:
        print(verdict_details(args.node, checked))
    for reason in checked.reasons:
        print(reason, file=sys.stderr)
    return checked.status


def verdict_details(node: str, checked) -> str:
    claims = checked.claims
    if claims is None:
        return f"{node}: NOT genuine: the result does not verify with the server's signing keys"
    if checked.status == verification.REFUSED:
        verdict = "genuine, but NOT as asked"
    else:
        statuses = {v.get("ear.status") for v in (claims.get("submods") or {}).values() if isinstance(v, dict)}
        verdict = "genuine and affirming" if statuses == {"affirming"} else "genuine but CONTRAINDICATED"
    verifier = claims.get("ear.verifier-id")
    signed = claims.get("iat")
    lines = fields(
        [
            ("node", claims.get("node")),
            ("signed", timestamp(signed) if is_number(signed) else signed),
            ("verifier", verifier.get("build") if isinstance(verifier, dict) else verifier),
            ("nonce", claims.get("eat_nonce")),
        ]
    )
    measurements = claims.get("measurements")
    text = f"{node}: {verdict}\n\n{lines}"
    if isinstance(measurements, dict) and measurements:
        text += "\n\n" + table(("COMPONENT", "MEASUREMENT"), sorted(measurements.items()))
    if firmware := verification.firmware_facts(claims):
        text += "\n\n" + table(("FIRMWARE", "VERSION", "DIGEST", "REPAIRED"), firmware)
    return text


if __name__ == "__main__":
    sys.exit(main())
