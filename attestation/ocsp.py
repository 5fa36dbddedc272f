"""OCSP answers for the certificates of NVIDIA's chains (the GPUs' device chains), kept with their
validity: fetched from the responder a certificate names when the control plane can reach it, or
imported from files an operator carried in (an air-gapped control plane). One row per certificate,
the newest answer; whether it is good at a time is attestation/verifier/revocation.py's to say.

A fetch goes through core/outbound.py. The responder a certificate names goes to public addresses
only (the chain comes with the evidence, so its URLs are not the operator's choice); a responder
the operator names instead (a mirror of NVIDIA's) may be anywhere. A fetched answer is kept only if
the certificate's issuer, or a responder it authorized, signed it for that certificate.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from django.conf import settings
from django.db import transaction

from attestation.models import OcspResponse, OcspSource
from attestation.verifier.gpu_evidence import RevocationCheck
from attestation.verifier.revocation import (
    ocsp_request,
    read_answer,
    responder_url,
    revocation_failures,
    signature_problem,
    single_response,
)
from attestation.verifier.verdict import shown
from core import clock, outbound

log = logging.getLogger(__name__)
MAX_OCSP_BYTES = 64 * 1024  # NVIDIA's answers are about 2 KiB, their responder certificate included
# Asked for a certificate that names no responder: some of NVIDIA's device certificates name none.
NVIDIA_OCSP_RESPONDER = "http://ocsp.ndis.nvidia.com/"


def import_ocsp_responses(source: str) -> dict[str, str]:
    """Keep the answers in a file or every file of a directory; {file name: what became of it}.
    ValueError naming the file that is not readable or not a successful OCSP answer (none is kept then)."""
    path = Path(source)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    answers = []
    for file in files:
        try:
            if file.stat().st_size > MAX_OCSP_BYTES:
                raise ValueError(f"over {MAX_OCSP_BYTES} bytes")
            der = file.read_bytes()
            read_answer(der)
        except OSError as error:
            raise ValueError(f"cannot read {file}: {error}") from error
        except ValueError as error:
            raise ValueError(f"{file}: {error}") from error
        answers.append((file.name, der))
    with transaction.atomic():
        return {name: store_answer(der, OcspSource.IMPORTED) for name, der in answers}


def store_answer(der: bytes, source: OcspSource) -> str:
    """Keep a successful answer (read_answer) for each certificate it answers for, unless one as
    new is kept already; says which it was."""
    response = read_answer(der)
    fetched_at = clock.now()
    outcomes = set()
    with transaction.atomic():
        for single in response.responses:
            serial, key_hash = f"{single.serial_number:x}", single.issuer_key_hash.hex()
            kept = OcspResponse.objects.select_for_update().filter(serial_number=serial, issuer_key_hash=key_hash)
            newest = kept.first()
            if newest is not None and newest.this_update >= single.this_update_utc:
                outcomes.add("kept the newer answer already stored")
                continue
            OcspResponse.objects.update_or_create(
                serial_number=serial,
                issuer_key_hash=key_hash,
                defaults={
                    "der": der,
                    "this_update": single.this_update_utc,
                    "next_update": single.next_update_utc,
                    "fetched_at": fetched_at,
                    "source": source,
                },
            )
            outcomes.add("stored")
    return ", ".join(sorted(outcomes))


def stored_answers(chain: Sequence[x509.Certificate]) -> list[bytes]:
    """The answers kept for the chain's certificates (by serial: the verifier matches the issuer)."""
    serials = [f"{certificate.serial_number:x}" for certificate in chain]
    return [bytes(der) for der in OcspResponse.objects.filter(serial_number__in=serials).values_list("der", flat=True)]


def chain_revocation_failures(
    chain: Sequence[x509.Certificate], *, at: datetime, max_age: timedelta | None = None
) -> list[str]:
    """Why the chain (leaf first, root last) is not known unrevoked at `at` by the kept answers."""
    return revocation_failures(chain, stored_answers(chain), at=at, max_age=max_age)


def revocation_check(
    *,
    at: datetime,
    max_age: timedelta | None,
    fetch: bool,
    responder: str | None = None,
    on_problem: Callable[[str], None] = log.warning,
) -> RevocationCheck:
    """Revocation by the kept answers; where `fetch`, a chain that lacks one first asks for fresh
    answers (the verifier asks only about chains verified to their root, so a forged chain's
    responder is never called); `on_problem` hears why a fetch got none."""

    # A node's GPUs share most of their chain, and a responder that cannot be reached for one
    # cannot for the next: each certificate is asked about once, and a silent responder no more,
    # so that an unreachable one costs one deadline per appraisal, not one per GPU.
    asked: set[x509.Certificate] = set()
    unreachable: set[str] = set()

    def check(chain: tuple[x509.Certificate, ...]) -> list[str]:
        failures = chain_revocation_failures(chain, at=at, max_age=max_age)
        if failures and fetch and not asked.issuperset(chain[:-1]):
            asked.update(chain[:-1])
            for problem in fetch_ocsp_responses(chain, responder=responder, unreachable=unreachable):
                on_problem(f"OCSP: {problem}")
            failures = chain_revocation_failures(chain, at=at, max_age=max_age)
        return failures

    return check


def fetch_ocsp_responses(
    chain: Sequence[x509.Certificate], *, responder: str | None = None, unreachable: set[str] | None = None
) -> list[str]:
    """Ask for and keep an answer for each certificate of the chain but the root, from `responder`,
    or else the one the certificate names, or else NVIDIA's; why any was not had (the verdict fails
    for want of it). A responder in `unreachable` is not asked; one that cannot be reached joins it."""
    problems = []
    unreachable = set() if unreachable is None else unreachable
    for certificate, issuer in itertools.pairwise(chain):
        subject = shown(certificate.subject.rfc4514_string())
        url = responder or responder_url(certificate) or NVIDIA_OCSP_RESPONDER
        if url in unreachable:
            problems.append(f"{subject}: {url}: not asked again (it could not be reached)")
            continue
        try:
            der = _ask(url, ocsp_request(certificate, issuer), check=outbound.any_address if responder else None)
        except outbound.OutboundError as error:
            unreachable.add(url)
            problems.append(f"{subject}: {url}: {error.reason}")
            continue
        except ValueError as error:
            problems.append(f"{subject}: {url}: {error}")
            continue
        try:
            response = read_answer(der)
        except ValueError as error:
            problems.append(f"{subject}: {url}: {error}")
            continue
        single = single_response(response, certificate, issuer)
        problem = (
            "an OCSP answer for another certificate"
            if single is None
            else signature_problem(response, issuer, response.produced_at_utc)
        )
        if problem is not None:
            problems.append(f"{subject}: {url}: {problem}")
            continue
        store_answer(der, OcspSource.FETCHED)
    return problems


def _ask(url: str, request: bytes, *, check: outbound.AddressCheck | None) -> bytes:
    """POST the request (RFC 6960, appendix A.1): outbound.OutboundError where the responder could
    not be reached (or refused by address), ValueError for an answer that is not one."""
    answer = outbound.request(
        "POST",
        url,
        check=check or outbound.public_only(),
        deadline=settings.OUTBOUND_DEADLINE_SECONDS,
        max_body_bytes=MAX_OCSP_BYTES,
        headers={"Content-Type": "application/ocsp-request", "Accept": "application/ocsp-response"},
        body=request,
    )
    if answer.status_code != 200:
        raise ValueError(f"answered {answer.status_code}")
    return answer.body
