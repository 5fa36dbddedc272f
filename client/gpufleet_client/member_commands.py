"""`gpufleet members` and its commands: list, invite, role, remove, sign-out."""

from __future__ import annotations

import sys

from gpufleet_client.command_support import OK, client, emit_json
from gpufleet_client.config import Config
from gpufleet_client.tables import fields, table, when

ROLES = ("admin", "member", "viewer")


def do_members(args, config: Config) -> int:
    page = client(config).members()
    if args.json:
        emit_json(page)
        return OK
    rows = [(m["id"], m.get("username"), m.get("email"), m.get("role")) for m in page.get("results", [])]
    if rows:
        print(table(("ID", "USERNAME", "EMAIL", "ROLE"), rows))
    else:
        print("no members", file=sys.stderr)
    return OK


def do_invite(args, config: Config) -> int:
    invitation = client(config).invite(args.email, args.role)
    if args.json:
        emit_json(invitation)
        return OK
    print(fields([("url", invitation.get("url")), ("expires", when(invitation.get("expires_at")))]))
    print(f"give {args.email} the URL: it makes them a {args.role} once they accept it", file=sys.stderr)
    return OK


def do_change_role(args, config: Config) -> int:
    member = client(config).change_member(args.id, args.role)
    if args.json:
        emit_json(member)
        return OK
    print(f"member {member.get('id', args.id)} ({member.get('username')}) is now {member.get('role')}")
    return OK


def do_remove_member(args, config: Config) -> int:
    client(config).remove_member(args.id)
    if not args.json:
        print(f"member {args.id} removed: their keys act for no one from now on")
    return OK


def do_sign_out_member(args, config: Config) -> int:
    client(config).sign_out_member(args.id)
    if not args.json:
        print(f"member {args.id} signed out: their pages show nothing of the organisation until they sign in again")
    return OK
