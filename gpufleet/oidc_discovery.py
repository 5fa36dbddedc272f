"""Where an OpenID provider's endpoints are: read once from its discovery document when the settings
load (gpufleet/settings.py, where single sign-on is on)."""

import sys

import requests


def oidc_provider_settings(issuer: str, *, timeout: float, variable: str = "GPUFLEET_OIDC_ISSUER") -> dict[str, str]:
    """mozilla-django-oidc's OIDC_OP_* settings and signing algorithm, from the issuer's discovery
    document; one that cannot be read stops the process as the environment's readers do."""
    try:
        response = requests.get(f"{issuer}/.well-known/openid-configuration", timeout=timeout)
        response.raise_for_status()
        document = response.json()
        endpoints = {
            "OIDC_OP_AUTHORIZATION_ENDPOINT": document["authorization_endpoint"],
            "OIDC_OP_TOKEN_ENDPOINT": document["token_endpoint"],
            "OIDC_OP_USER_ENDPOINT": document["userinfo_endpoint"],
            "OIDC_OP_JWKS_ENDPOINT": document["jwks_uri"],
        }
    except (requests.RequestException, ValueError, KeyError, TypeError) as error:
        sys.exit(f"gpu-fleet: {variable}={issuer!r}: expected an OpenID provider's discovery document ({error!r})")
    if document.get("issuer", "").rstrip("/") != issuer:
        sys.exit(f"gpu-fleet: {variable}={issuer!r}: expected the issuer its discovery document names")
    algorithms = document.get("id_token_signing_alg_values_supported") or ["RS256"]
    return endpoints | {"OIDC_RP_SIGN_ALGO": "RS256" if "RS256" in algorithms else algorithms[0]}
