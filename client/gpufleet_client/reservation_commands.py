"""`gpufleet reserve`, `list`, `show`, `extend` and `release`."""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta
from typing import Any

from gpufleet_client.api import ApiError, Client
from gpufleet_client.command_support import (
    GIVEN_UP,
    OK,
    REFUSED,
    UNREACHABLE,
    USAGE,
    Failed,
    client,
    emit_json,
    exit_status,
    iso,
)
from gpufleet_client.config import Config
from gpufleet_client.tables import fields, table, when


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
