import json
from datetime import datetime, timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from attestation import gpu_rims_import, ocsp, services, verifier
from attestation.models import TrustAnchorRole
from attestation.verifier.gpu_evidence import (
    CandidateRim,
    GpuReferences,
    check_gpu_evidence,
    read_report,
    rim_lookup,
)
from core import clock


class Command(BaseCommand):
    help = (
        "Verify one NVIDIA GPU's evidence (its SPDM report and certificate chain) and compare its measurements"
        " with the RIMs of its driver and VBIOS; prints the result as JSON, exits 0 only when every check passes."
    )

    def add_arguments(self, parser):
        parser.add_argument("--report", required=True, type=Path, help="The attestation report: hex text or binary.")
        parser.add_argument("--chain", required=True, type=Path, help="Its certificate chain, PEM, leaf first.")
        parser.add_argument(
            "--nonce", required=True, type=bytes.fromhex, help="The nonce the GPU was asked to sign, hex."
        )
        parser.add_argument(
            "--rims", type=Path, help="A directory of RIMs to compare with; default: the imported ones."
        )
        parser.add_argument("--root", type=Path, help="The device root, PEM; default: the nvidia_device_root anchor.")
        parser.add_argument(
            "--at", type=datetime.fromisoformat, help="Verify as of this ISO time (with its zone); default: now."
        )
        parser.add_argument("--no-revocation", action="store_true", help="Do not check revocation at all.")
        parser.add_argument(
            "--fetch-ocsp",
            action="store_true",
            help="Ask OCSP responders for the answers a verified chain lacks (kept, as import_ocsp_responses does).",
        )
        parser.add_argument(
            "--ocsp-responder", help="Ask this responder (e.g. a mirror of NVIDIA's) rather than the one each names."
        )
        parser.add_argument(
            "--ocsp-max-age",
            type=int,
            metavar="SECONDS",
            help="Accept an OCSP answer this old (from its thisUpdate) even past its nextUpdate.",
        )

    def handle(self, *args, report, chain, nonce, rims, root: Path | None, at, no_revocation, **options):
        if at is not None and at.tzinfo is None:
            raise CommandError("--at needs a time zone, e.g. 2024-01-01T00:00:00+00:00")
        if options["ocsp_max_age"] is not None and options["ocsp_max_age"] < 0:
            raise CommandError("--ocsp-max-age must be a number of seconds, 0 or more")
        at = at or clock.now()
        try:
            device_root = (
                verifier.load_trust_anchor("device root", root.read_text())
                if root is not None
                else gpu_rims_import.root(TrustAnchorRole.NVIDIA_DEVICE_ROOT)
            )
            rims = (
                rim_lookup(
                    [
                        CandidateRim(document.name, document.xml)
                        for document in gpu_rims_import.read_documents(str(rims))
                    ]
                )
                if rims is not None
                else services.imported_rims
            )
            references = GpuReferences(
                device_root=device_root,
                rim_root=gpu_rims_import.root(TrustAnchorRole.NVIDIA_RIM_ROOT),
                rims=rims,
                revocation=None if no_revocation else self.revocation_check(at, **options),
            )
            checked = check_gpu_evidence(
                report=read_report(report.read_bytes()),
                chain_pem=chain.read_text(),
                nonce=nonce,
                references=references,
                at=at,
            )
        except (OSError, ValueError) as error:
            raise CommandError(str(error)) from error
        result = {
            "failures": [f"{f.code} {f.component}: expected {f.expected}, found {f.found}" for f in checked.failures],
            "driver_version": checked.driver_version,
            "vbios_version": checked.vbios_version,
            "rims": checked.rims,
        }
        self.stdout.write(json.dumps(result, indent=2))
        if checked.failures:
            raise SystemExit(1)

    def revocation_check(self, at: datetime, *, fetch_ocsp, ocsp_responder, ocsp_max_age, **options):
        return ocsp.revocation_check(
            at=at,
            max_age=timedelta(seconds=ocsp_max_age) if ocsp_max_age is not None else None,
            fetch=fetch_ocsp,
            responder=ocsp_responder,
            on_problem=self.stderr.write,
        )
