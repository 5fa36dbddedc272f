"""`gpufleet capacity`, `quota` and `usage`."""

from __future__ import annotations

from typing import Any

from gpufleet_client.command_support import OK, client, emit_json, is_number, iso
from gpufleet_client.config import Config
from gpufleet_client.tables import cell_text, table

RACK_LEVEL = "nvlink_domain"  # a rack's fabric level (an NVLink domain)


def do_capacity(args, config: Config) -> int:
    answer = client(config, token=False).capacity(depth=args.depth)
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
    """The fabric's domains down to the level above the racks (or as deep as the answer lists
    them), each indented under its parent."""
    rows = []
    for domain in domains:
        if domain.get("level") == RACK_LEVEL:  # the pods' table counts racks already
            continue
        rows.append(
            ("  " * depth + str(domain.get("name")), domain.get("level"), domain.get("nodes"), domain.get("available"))
        )
        rows += domain_rows(domain.get("children") or [], depth=depth + 1)
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
    rows = [(row.get("reservation"), row.get("user") or "-", *(row.get(key) for key in numeric)) for row in results]
    rows += [
        ("member", row.get("user") or "-", *(row.get(key) for key in numeric)) for row in answer.get("members") or []
    ]
    rows.append(("total", "all", *(total.get(key) for key in numeric)))
    print(table(("RESERVATION", "USER", *(key.upper() for key in numeric)), rows))
    return OK
