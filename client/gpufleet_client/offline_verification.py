"""Offline verification of a signed attestation result: `python -m attestation.verify` and
`gpufleet verify` both run this module's checks, and the control plane's API verifies with it.

It lives in the tenants' client package so that a tenant who installs only the client verifies
with the same code as everyone else. Needs only PyJWT and cryptography: no Django, no network.
A good signature only proves that the control plane once said what the result says, of some
node, at some time; the options say what else to require:

    --node NAME              the result is about this node (its `node` claim and its verdict);
    --nonce NONCE            it answers this nonce: base64url as in the result's `eat_nonce`
                             (padding optional), or hex, as the node's agent received it;
    --max-age SECONDS        it was signed (`iat`) at most this long ago by this machine's clock,
                             and not more than 60 s in this clock's future;
    --expect-network FABRIC=MEMBERSHIP
                             its `networks` claim reads the node on FABRIC (ethernet, infiniband,
                             nvlink) as MEMBERSHIP, confirmed by the fabric's read-back: the
                             access VLAN (`ethernet=1001`), the full-member P_Keys
                             (`infiniband=0x1001`), the NVLink partition (`nvlink=gpufleet-r42`);
                             repeatable, one a fabric (`infiniband=`: no P_Key at all);
    --allow-contraindicated  a genuine contraindicated result is an answer too (exit 0).

Exit status:

    0  genuine, as asked, and affirming (or contraindicated, with --allow-contraindicated);
    1  not genuine (signature, key, algorithm, malformed), or genuine but not as asked
       (another node, another nonce, too old, from the future, other fabric memberships);
    2  an unreadable file or a bad argument;
    3  genuine and as asked, but contraindicated: the node failed attestation.

Every reason for a status other than 0 goes to stderr, one a line. The claims go to stdout whenever
the signature verifies, so a refused result can be read; only status 0 means it is the answer.
Among them, `firmware` (when the node has a firmware baseline) lists each firmware component's
version and digest as the node's BMC reported them at that inspection, and what it repaired;
`networks` the node's membership of each fabric as the control plane last read it back from the
fabric's manager: at an inspection, off every tenant's network; at a handoff to a tenant (a
result with `attested_at`, the inspection's time, whose verdict it carries), on that tenant's.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import math
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ALGORITHM = "EdDSA"  # Ed25519 signatures, as the control plane signs results

ANSWERED, REFUSED, UNREADABLE, CONTRAINDICATED = 0, 1, 2, 3
CLOCK_SKEW_SECONDS = 60  # how far in the future of the reader's clock a result may be signed
HEX = re.compile(r"(?:[0-9a-fA-F]{2})+")
BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
FABRICS = ("ethernet", "infiniband", "nvlink")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attestation.verify",
        description="Verify a signed attestation result (EAR JWT) offline.",
        epilog="Exit status: 0 genuine, as asked, affirming; 1 not genuine or not as asked; "
        "2 unreadable input; 3 genuine and as asked but contraindicated.",
    )
    parser.add_argument("result", help="the JWT, as GET /v1/nodes/{name}/attestation returns in 'token' ('-': stdin)")
    parser.add_argument("--jwks", required=True, help="the keys, as GET /v1/attestation/keys returns them")
    parser.add_argument("--node", help="refuse a result about another node")
    parser.add_argument("--nonce", type=nonce_readings, help="refuse a result for another nonce (base64url or hex)")
    parser.add_argument("--max-age", type=seconds, metavar="SECONDS", help="refuse a result signed longer ago")
    add_network_expectations(parser)
    parser.add_argument(
        "--allow-contraindicated", action="store_true", help="exit 0 on a genuine contraindicated result too"
    )
    args = parser.parse_args(argv)
    try:
        token = (sys.stdin.read() if args.result == "-" else _read(args.result)).strip()
        keys = json.loads(_read(args.jwks))
    except (OSError, UnicodeDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return UNREADABLE
    except ValueError as err:
        print(f"error: {args.jwks} is not JSON: {err}", file=sys.stderr)
        return UNREADABLE
    checked = check_result(
        token,
        keys,
        node=args.node,
        nonce=args.nonce,
        max_age=args.max_age,
        networks=dict(args.expect_network),
        allow_contraindicated=args.allow_contraindicated,
        now=time.time(),
    )
    if checked.claims is not None:
        print(json.dumps(checked.claims, indent=2, sort_keys=True))
    for reason in checked.reasons:
        print(reason, file=sys.stderr)
    return checked.status


@dataclass(frozen=True)
class Checked:
    """What a signed result is worth, as asked: the exit status, the claims if the signature
    verifies (None otherwise), and every reason for a status other than 0, one a line."""

    status: int  # ANSWERED, REFUSED or CONTRAINDICATED
    claims: dict | None
    reasons: list[str]


def check_result(
    token: str,
    keys: object,
    *,
    node: str | None = None,
    nonce: frozenset[bytes] | None = None,
    max_age: float | None = None,
    networks: Mapping[str, str] | None = None,
    allow_contraindicated: bool = False,
    now: float,
) -> Checked:
    """Every check of this module on `token` with the JWKS `keys`: this command's, and `gpufleet verify`'s."""
    try:
        claims = verify_result(token, keys)
    except ResultInvalid as err:
        return Checked(REFUSED, None, [f"invalid result: {err}"])
    mismatches = not_as_asked(claims, node=node, nonce=nonce, max_age=max_age, now=now)
    mismatches += networks_not_as_asked(claims, networks or {})
    contraindications = contraindicated(claims, node=node)
    reasons = [f"not as asked: {reason}" for reason in mismatches]
    reasons += [f"contraindicated: {reason}" for reason in contraindications]
    if mismatches:
        return Checked(REFUSED, claims, reasons)
    if contraindications and not allow_contraindicated:
        return Checked(CONTRAINDICATED, claims, reasons)
    return Checked(ANSWERED, claims, reasons)


def not_as_asked(
    claims: dict, *, node: str | None, nonce: frozenset[bytes] | None, max_age: float | None, now: float
) -> list[str]:
    """Every way the claims are not about `node`, for `nonce`, signed within `max_age` of `now`."""
    reasons = []
    if node is not None:
        about, submods = claims.get("node"), claims.get("submods")
        if about != node:
            reasons.append(f"it is about node {about!r}, not {node!r}")
        elif not isinstance(submods, dict) or node not in submods:
            reasons.append(f"it carries no verdict (submods) on node {node!r}")
    if nonce is not None:
        answered = claims.get("eat_nonce")
        answered_bytes = _base64url(answered) if isinstance(answered, str) else None
        if answered_bytes is None:
            reasons.append(f"its eat_nonce {answered!r} is not base64url")
        elif answered_bytes not in nonce:
            reasons.append(f"it answers nonce {answered} (base64url), not the one given")
    if max_age is not None:
        signed = claims.get("iat")
        if not isinstance(signed, int | float) or isinstance(signed, bool) or not math.isfinite(signed):
            reasons.append(f"its iat {signed!r} is not a time")
        elif signed - now > CLOCK_SKEW_SECONDS:
            reasons.append(
                f"it was signed at {_when(signed)}, {signed - now:.0f} s after this machine's clock ({_when(now)})"
            )
        elif now - signed > max_age:
            reasons.append(f"it was signed at {_when(signed)}, {now - signed:.0f} s ago: more than {max_age:g} s")
    return reasons


def networks_not_as_asked(claims: dict, expected: Mapping[str, str]) -> list[str]:
    """Every fabric whose membership the `networks` claim does not prove to be the one `expected`
    (fabric -> membership): another, none, or one the fabric's read-back did not confirm."""
    if not expected:
        return []
    if not isinstance(claims.get("networks"), dict):
        return ["it carries no networks claim: no fabric membership is proven"]
    read_back = {fabric: (membership, confirmed) for fabric, membership, _, _, confirmed in network_facts(claims)}
    reasons = []
    for fabric, membership in expected.items():
        if fabric not in read_back:
            reasons.append(f"it reads no {fabric} membership")
        elif read_back[fabric][0] != membership:
            reasons.append(f"it reads {fabric} membership {read_back[fabric][0]!r}, not {membership!r}")
        elif not read_back[fabric][1]:
            reasons.append(f"its {fabric} membership {membership!r} was not confirmed by the fabric's read-back")
    return reasons


def contraindicated(claims: dict, *, node: str | None) -> list[str]:
    """Why the verdict does not affirm (on `node`, if the result has a verdict on it), with each failure."""
    submods = claims.get("submods")
    if not isinstance(submods, dict) or not submods:
        return ["it carries no verdict (no submods)"]
    judged = {node: submods[node]} if node in submods else submods
    reasons = []
    for name, verdict in judged.items():
        status = verdict.get("ear.status") if isinstance(verdict, dict) else None
        if status != "affirming":
            reasons.append(f"node {name} is {status}")
    if reasons:
        failures = claims.get("failures")
        for failure in failures if isinstance(failures, list) else []:
            if isinstance(failure, dict):
                code, component = failure.get("code"), failure.get("component")
                reasons.append(f"{code} {component}: expected {failure.get('expected')}, found {failure.get('found')}")
            else:
                reasons.append(str(failure))
    return reasons


def firmware_facts(claims: dict) -> list[tuple[str, str, str, bool]]:
    """(component, version, digest, repaired at that inspection) of each firmware component the
    result's `firmware` claim lists, as the node's BMC reported them when the control plane checked
    them against the node's baseline. Empty for a result without the claim: it is not required
    (a node without a baseline, or a result signed before there were any)."""
    facts = claims.get("firmware")
    if not isinstance(facts, dict):
        return []
    components = facts.get("components")
    if not isinstance(components, dict):
        return []
    repaired = facts.get("repaired")
    repaired = set(repaired) if isinstance(repaired, list) and all(isinstance(r, str) for r in repaired) else set()
    return [
        (str(name), str(component.get("version", "")), str(component.get("digest", "")), name in repaired)
        for name, component in sorted(components.items())
        if isinstance(component, dict)
    ]


def network_facts(claims: dict) -> list[tuple[str, str, bool, str | None, bool]]:
    """(fabric, membership, a tenant's network?, read at, confirmed) of each fabric the result's
    `networks` claim lists, the three fabrics first. Empty for a result without the claim (signed
    before there was one): it is not required unless a membership is expected."""
    claim = claims.get("networks")
    fabrics = claim.get("fabrics") if isinstance(claim, dict) else None
    if not isinstance(fabrics, dict):
        return []
    order = sorted(fabrics, key=lambda fabric: (FABRICS.index(fabric) if fabric in FABRICS else len(FABRICS), fabric))
    return [
        (
            str(fabric),
            str(shown.get("membership", "")),
            shown.get("tenant") is True,
            shown.get("read_at") if isinstance(shown.get("read_at"), str) else None,
            shown.get("confirmed", True) is True,
        )
        for fabric in order
        if isinstance(shown := fabrics[fabric], dict)
    ]


def add_network_expectations(parser: argparse.ArgumentParser) -> None:
    """--expect-network FABRIC=MEMBERSHIP, repeatable: `args.expect_network`, (fabric, membership) pairs."""
    parser.add_argument(
        "--expect-network",
        type=network_expectation,
        action="append",
        default=[],
        metavar="FABRIC=MEMBERSHIP",
        help="refuse a result that does not read the node on this membership of FABRIC (ethernet=1001, "
        "infiniband=0x1001, nvlink=PARTITION), confirmed; repeatable",
    )


def network_expectation(text: str) -> tuple[str, str]:
    fabric, equals, membership = text.partition("=")
    if not equals or fabric not in FABRICS:
        raise argparse.ArgumentTypeError(f"{text!r} is not FABRIC=MEMBERSHIP with FABRIC one of {', '.join(FABRICS)}")
    return fabric, membership


def nonce_readings(text: str) -> frozenset[bytes]:
    """The bytes `text` stands for as base64url (padding optional) and as hex: either may be meant."""
    readings = {bytes.fromhex(text)} if HEX.fullmatch(text) else set()
    decoded = _base64url(text)
    if decoded is not None:
        readings.add(decoded)
    if not readings:
        raise argparse.ArgumentTypeError(f"{text!r} is neither base64url (as in eat_nonce) nor hex")
    return frozenset(readings)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    return value


def _base64url(text: str) -> bytes | None:
    unpadded = text.rstrip("=")
    if not BASE64URL.fullmatch(unpadded) or len(unpadded) % 4 == 1:
        return None
    return base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))


def _when(timestamp: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return f"{timestamp:g} (epoch seconds)"


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


class ResultInvalid(Exception):
    """A signed result that does not verify: bad signature, unknown kid, wrong algorithm, malformed."""


def verify_result(token: str, jwks: object) -> dict:
    """The claims of a result signed by a key in `jwks`; raises ResultInvalid otherwise."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as err:
        raise ResultInvalid(f"not a JWT: {err}") from None
    if header.get("alg") != ALGORITHM:
        raise ResultInvalid(f"algorithm {header.get('alg')!r} is not {ALGORITHM}")
    kid = header.get("kid")
    key = _public_key(jwks, kid)
    try:
        # A result stays valid whatever the reader's clock says: iat is when it was signed, not a window.
        return jwt.decode(token, key, algorithms=[ALGORITHM], options={"require": ["iat"], "verify_iat": False})
    except jwt.PyJWTError as err:
        raise ResultInvalid(f"the result does not verify with key {kid}: {err}") from None


def _public_key(keys: object, kid: object) -> Ed25519PublicKey:
    if not isinstance(keys, dict):
        raise ResultInvalid('the JWKS is not {"keys": [...]}')
    try:
        # PyJWKSet skips the entries it cannot parse, so a malformed key is as good as absent.
        usable = jwt.PyJWKSet.from_dict(keys).keys
    except (jwt.PyJWKSetError, TypeError):  # TypeError: an "alg" that is a list or an object
        # Not PyJWT's message, which blames a missing `cryptography` for any set of unusable keys.
        raise ResultInvalid("the JWKS is malformed or has no usable key") from None
    # Looked up by hand: PyJWKSet's own lookup takes a str, and a header's kid may be anything.
    jwk = next((usable_key for usable_key in usable if usable_key.key_id == kid), None)
    if jwk is None:
        raise ResultInvalid(f"unknown key id {kid!r}: not among the usable keys of the JWKS")
    # Only an Ed25519 public key: not Ed448 (also EdDSA to PyJWT), nor a key with its private half.
    if not isinstance(jwk.key, Ed25519PublicKey):
        raise ResultInvalid(f"key {kid} is not an Ed25519 EdDSA key")
    return jwk.key
