"""`gpufleet verify`: a node's signed attestation result, fetched and verified here."""

from __future__ import annotations

import sys
import time

from gpufleet_client import offline_verification as verification
from gpufleet_client.api import ApiError
from gpufleet_client.command_support import UNREACHABLE, client, emit_json, exit_status, is_number, refused
from gpufleet_client.config import Config
from gpufleet_client.tables import fields, table, timestamp, when


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
        networks=dict(args.expect_network),
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
    measurements = claims.get("measurements")
    text = f"{node}: {verdict}\n\n{fields(_summary(claims))}"
    if isinstance(measurements, dict) and measurements:
        text += "\n\n" + table(("COMPONENT", "MEASUREMENT"), sorted(measurements.items()))
    if firmware := verification.firmware_facts(claims):
        text += "\n\n" + table(("FIRMWARE", "VERSION", "DIGEST", "REPAIRED"), firmware)
    if memberships := verification.network_facts(claims):
        rows = [
            (fabric, membership or "none", tenant, when(read_at) if confirmed else "unconfirmed")
            for fabric, membership, tenant, read_at, confirmed in memberships
        ]
        text += "\n\n" + table(("FABRIC", "MEMBERSHIP", "TENANT NETWORK", "READ AT"), rows)
    return text


def _summary(claims: dict) -> list[tuple[str, object]]:
    """Who signed what about which node when; a handoff's result (with `attested_at`) carries the
    verdict of the inspection at that time, and the reservation whose networks it was handed on."""
    verifier = claims.get("ear.verifier-id")
    signed, attested, networks = claims.get("iat"), claims.get("attested_at"), claims.get("networks")
    summary = [
        ("node", claims.get("node")),
        ("signed", timestamp(signed) if is_number(signed) else signed),
        ("verifier", verifier.get("build") if isinstance(verifier, dict) else verifier),
        ("nonce", claims.get("eat_nonce")),
    ]
    if attested is not None:
        summary.append(("attested", timestamp(attested) if is_number(attested) else attested))
    if isinstance(networks, dict):
        summary.append(("reservation", networks.get("reservation")))
    return summary
