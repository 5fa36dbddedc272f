"""`gpufleet verify`'s checks: attestation's own, imported, never copied.

The offline verification of a signed attestation result exists once in the repository:
attestation/ear.py checks the signature (verify_result) and attestation/verify.py the rest
(node, nonce, age, verdict: check_result, the function `python -m attestation.verify` runs).
Both need only PyJWT and cryptography. The control plane cannot import them from this package
instead (its Docker image installs requirements.txt alone, not the client), so the client
imports them from the gpu-fleet checkout: importable already when the checkout is on the path
(`python -m gpufleet_client` run in it), or found beside this package when the client was
installed from the checkout (`pip install -e ./client`, as `make setup` does).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

# attestation.verify's exit statuses, which `gpufleet verify` keeps.
ANSWERED, REFUSED, CONTRAINDICATED = 0, 1, 3
CHECKOUT = Path(__file__).resolve().parents[2]  # client/gpufleet_client/ -> the repository, if installed from it


class VerifierMissing(Exception):
    """attestation's verifier cannot be imported here."""


def checks() -> ModuleType:
    """attestation.verify, imported from the gpu-fleet checkout."""
    try:
        return _import()
    except ImportError:
        pass
    if (CHECKOUT / "attestation" / "verify.py").is_file() and str(CHECKOUT) not in sys.path:
        sys.path.append(str(CHECKOUT))
        try:
            return _import()
        except ImportError as error:
            raise VerifierMissing(_missing(f"{CHECKOUT}: {error}")) from None
    raise VerifierMissing(_missing("no gpu-fleet checkout beside this installation"))


def _import() -> ModuleType:
    module = importlib.import_module("attestation.verify")
    if not hasattr(module, "check_result"):
        raise ImportError(f"{module.__file__} is not gpu-fleet's attestation.verify")
    return module


def _missing(why: str) -> str:
    return (
        "gpufleet verify checks results with gpu-fleet's own verifier (attestation/verify.py), "
        f"not found here ({why}): "
        "install the client from a gpu-fleet checkout (pip install -e ./client), or run "
        "python -m attestation.verify in one"
    )


def nonce_argument(text: str) -> frozenset[bytes]:
    """--nonce, read as attestation.verify reads it (base64url or hex)."""
    try:
        module = checks()
    except VerifierMissing as missing:
        raise argparse.ArgumentTypeError(str(missing)) from None
    return module.nonce_readings(text)


def seconds_argument(text: str) -> float:
    """--max-age, read as attestation.verify reads it."""
    try:
        module = checks()
    except VerifierMissing as missing:
        raise argparse.ArgumentTypeError(str(missing)) from None
    return module.seconds(text)
