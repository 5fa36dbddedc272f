"""X.509 pieces every certificate this code base issues shares (the metrics CA, bmcsim's BMC and
TPM PKI, the tests' attestation keys)."""

from cryptography import x509


def key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates and CRLs; anything else signs (TLS, quotes) and nothing more."""
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
