"""`gpufleet webhooks` and its commands: add, delete, deliveries, redeliver."""

from __future__ import annotations

import sys

from gpufleet_client.command_support import OK, client, emit_json
from gpufleet_client.config import Config
from gpufleet_client.tables import fields, table, when


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
