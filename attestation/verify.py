"""Verify a signed attestation result offline: `python -m attestation.verify RESULT.jwt --jwks KEYS.json`.

Needs only PyJWT and cryptography: no Django, no network. Prints the claims as JSON and exits 0
when the result is signed by a key in the JWKS; otherwise says why on stderr and exits 1
(2 for unreadable input files).
"""

from __future__ import annotations

import argparse
import json
import sys

from attestation.ear import ResultInvalid, verify_result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attestation.verify", description="Verify a signed attestation result (EAR JWT) offline."
    )
    parser.add_argument("result", help="the JWT, as GET /v1/nodes/{name}/attestation returns in 'token' ('-': stdin)")
    parser.add_argument("--jwks", required=True, help="the keys, as GET /v1/attestation/keys returns them")
    args = parser.parse_args(argv)
    try:
        token = (sys.stdin.read() if args.result == "-" else _read(args.result)).strip()
        keys = json.loads(_read(args.jwks))
    except (OSError, UnicodeDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"error: {args.jwks} is not JSON: {err}", file=sys.stderr)
        return 2
    try:
        claims = verify_result(token, keys)
    except ResultInvalid as err:
        print(f"invalid result: {err}", file=sys.stderr)
        return 1
    print(json.dumps(claims, indent=2, sort_keys=True))
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


if __name__ == "__main__":
    sys.exit(main())
