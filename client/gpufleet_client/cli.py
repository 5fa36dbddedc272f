"""`gpufleet`: the tenants' command line for a gpu-fleet control plane (see client/README.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from gpufleet_client import __version__
from gpufleet_client import offline_verification as verification
from gpufleet_client.api import ApiError
from gpufleet_client.arguments import (
    WAIT_INTERVAL_SECONDS,
    WAIT_TIMEOUT_SECONDS,
    attribute,
    hours,
    moment,
    positive_int,
    wait_seconds,
    whole_number,
)
from gpufleet_client.capacity_commands import do_capacity, do_quota, do_usage
from gpufleet_client.command_support import INTERRUPTED, OK, USAGE, Failed, refused
from gpufleet_client.config import ConfigError, load
from gpufleet_client.key_commands import do_create_key, do_keys, do_revoke_key
from gpufleet_client.member_commands import (
    ROLES,
    do_change_role,
    do_invite,
    do_members,
    do_remove_member,
    do_sign_out_member,
)
from gpufleet_client.reservation_commands import do_extend, do_list, do_release, do_reserve, do_show
from gpufleet_client.verify_command import do_verify
from gpufleet_client.webhook_commands import do_add_webhook, do_delete_webhook, do_deliveries, do_redeliver, do_webhooks

EXIT_CODES = """\
exit status:
  0  done
  1  refused by the server (401 API key not accepted, 409 conflict, 403 over quota or not
     allowed, 400 bad value, ...), the detail on stderr; or, with reserve --wait, the
     reservation failed or was not active in time
  2  usage error, or no API key / a bad config file
  3  not found (404): no such reservation, webhook, key or member
  4  the server could not be reached, or failed (5xx)
  verify: 0 genuine and affirming, 1 not genuine or not as asked (another node, nonce, too
  old, other networks; or no result for the node), 3 genuine but contraindicated, 4 server
  unreachable

configuration: GPUFLEET_URL (default http://127.0.0.1:8000) and GPUFLEET_KEY (an API key,
gf_...; GPUFLEET_TOKEN is its older name), else `url` and `key` (or `token`) in
$XDG_CONFIG_HOME/gpufleet/config.toml (~/.config/gpufleet/config.toml).
"""


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
    capacity = command("capacity", do_capacity, "free nodes per pod (needs no API key)")
    capacity.add_argument(
        "--depth",
        type=whole_number,
        metavar="N",
        help="list the fabric's domains N levels below each pod, 0 for none (default: the server's, "
        "every level of a small fleet)",
    )
    command("quota", do_quota, "what you may hold, and hold now")
    usage = command("usage", do_usage, "node time used, per reservation and per member")
    usage.add_argument("--from", dest="start", type=moment, metavar="TIME", help="from this time (ISO 8601)")
    usage.add_argument("--to", dest="end", type=moment, metavar="TIME", help="to this time (ISO 8601)")
    hooks = command("webhooks", do_webhooks, "list your webhooks; add, delete, and look at their deliveries")
    _webhook_commands(_adder(hooks.add_subparsers(title="webhook commands", metavar="COMMAND"), output))
    keys = command("keys", do_keys, "list your organisation's API keys; create and revoke them")
    _key_commands(_adder(keys.add_subparsers(title="key commands", metavar="COMMAND"), output))
    members = command(
        "members", do_members, "list your organisation's members; invite, change, remove and sign them out"
    )
    _member_commands(_adder(members.add_subparsers(title="member commands", metavar="COMMAND"), output))
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


def _key_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    command("list", do_keys, "the organisation's live keys, by prefix (a key is never shown again)")
    create = command("create", do_create_key, "make a key; it is shown this once, alone on the last line")
    create.add_argument("name", metavar="NAME", help="what the key is for, e.g. ci")
    create.add_argument(
        "--scope", choices=("read", "read-write"), help="read: it only reads; read-write (the default): it acts as you"
    )
    create.add_argument("--expires", type=moment, metavar="TIME", help="refused from this time on (ISO 8601)")
    create.add_argument(
        "--organisation",
        action="store_true",
        help="the organisation's key, acting as a member whoever leaves (an admin's)",
    )
    revoke = command("revoke", do_revoke_key, "revoke a key: every request with it is refused from now on")
    revoke.add_argument("id", type=positive_int, metavar="ID")


def _member_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    command("list", do_members, "the organisation's members and their roles")
    invite = command("invite", do_invite, "invite someone by email: prints the URL to give them, and its expiry")
    invite.add_argument("email", metavar="EMAIL")
    invite.add_argument("--role", choices=ROLES, default="member", help="their role once they accept (default member)")
    remove = command("remove", do_remove_member, "remove a member: the keys they made stop working")
    remove.add_argument("id", type=positive_int, metavar="ID")
    role = command("role", do_change_role, "change a member's role")
    role.add_argument("id", type=positive_int, metavar="ID")
    role.add_argument("role", choices=ROLES, metavar="ROLE", help=", ".join(ROLES))
    sign_out = command(
        "sign-out", do_sign_out_member, "end a member's signed-in pages for the organisation (their keys stay)"
    )
    sign_out.add_argument("id", type=positive_int, metavar="ID")


def _verify_arguments(verify: argparse.ArgumentParser) -> None:
    verify.add_argument("node", metavar="NODE")
    verify.add_argument(
        "--nonce", type=verification.nonce_readings, help="refuse a result for another nonce (base64url or hex)"
    )
    verify.add_argument(
        "--max-age", type=verification.seconds, metavar="SECONDS", help="refuse a result signed longer ago"
    )
    verification.add_network_expectations(verify)
    verify.add_argument(
        "--allow-contraindicated", action="store_true", help="exit 0 on a genuine contraindicated result too"
    )


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


if __name__ == "__main__":
    sys.exit(main())
