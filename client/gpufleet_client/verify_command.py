"""`gpufleet verify`: a node's signed attestation result, fetched and verified here."""

from __future__ import annotations

import sys
import time

from gpufleet_client import offline_verification as verification
from gpufleet_client.api import ApiError
from gpufleet_client.command_support import UNREACHABLE, client, emit_json, exit_status, is_number, refused
from gpufleet_client.config import Config
from gpufleet_client.tables import fields, table, timestamp


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
