"""`gpufleet keys` and its commands: list, create (the key shown once), revoke."""

from __future__ import annotations

import sys

from gpufleet_client.command_support import OK, client, emit_json, iso
from gpufleet_client.config import Config
from gpufleet_client.tables import fields, table, when


def do_keys(args, config: Config) -> int:
    """The organisation's live keys, named by their prefix: the server never shows a key again."""
    page = client(config).keys()
    if args.json:
        emit_json(page)
        return OK
    rows = [
        (
            k["id"],
            k.get("prefix"),
            k.get("name"),
            k.get("scope"),
            "organisation" if k.get("organisation_key") else k.get("created_by"),
            when(k.get("created_at")),
            when(k.get("expires_at")) if k.get("expires_at") else "never",
            when(k.get("last_used_at")),
        )
        for k in page.get("results", [])
    ]
    if rows:
        print(table(("ID", "PREFIX", "NAME", "SCOPE", "FOR", "CREATED", "EXPIRES", "LAST USED"), rows))
    else:
        print("no keys", file=sys.stderr)
    return OK


def do_create_key(args, config: Config) -> int:
    created = client(config).create_key(
        args.name,
        scope=args.scope,
        expires_at=iso(args.expires) if args.expires else None,
        organisation_key=args.organisation,
    )
    if args.json:
        emit_json(created)
        return OK
    print(
        fields(
            [
                ("id", created["id"]),
                ("name", created.get("name")),
                ("prefix", created.get("prefix")),
                ("scope", created.get("scope")),
                ("organisation", bool(created.get("organisation_key"))),
                ("expires", when(created.get("expires_at")) if created.get("expires_at") else "never"),
            ]
        )
    )
    print(
        'the key is shown only now: keep it (GPUFLEET_KEY, or key = "..." in the config file); '
        f"lists name it {created.get('prefix')}",
        file=sys.stderr,
    )
    print(created["key"])  # alone on the last line: `gpufleet keys create ci | tail -n 1`
    return OK


def do_revoke_key(args, config: Config) -> int:
    client(config).revoke_key(args.id)
    if not args.json:
        print(f"key {args.id} revoked: every request with it is refused from now on")
    return OK
