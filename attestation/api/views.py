from django.conf import settings
from django.http import Http404
from drf_spectacular.utils import extend_schema, inline_serializer
from gpufleet_client.offline_verification import ResultInvalid, verify_result
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from attestation import published_keys, services
from core.error_schema import ERROR


def served_keys() -> dict:
    """The JWKS this listener serves and checks results with: from the file the control plane
    exported where the listener holds no private key (the public listener's PUBLIC_JWKS_FILE), else
    from the signing keys themselves."""
    path = getattr(settings, "PUBLIC_JWKS_FILE", None)
    return services.public_keys() if path is None else published_keys.read(path)


class PublicReadView(APIView):
    authentication_classes = []
    permission_classes = [permissions.AllowAny]


class NodeAttestationView(PublicReadView):
    """The node's latest signed attestation result, and its claims as the signature vouches for them.

    A result signed by a key the control plane no longer serves is still shown, with `verified`
    false and no claims: nobody, this server included, should read claims it cannot vouch for."""

    @extend_schema(
        responses={
            200: inline_serializer(
                "SignedResult",
                {
                    "token": serializers.CharField(),
                    "claims": serializers.DictField(allow_null=True),
                    "verified": serializers.BooleanField(),
                },
            ),
            404: ERROR,
        }
    )
    def get(self, request, name: str):
        if not services.node_exists(name):
            raise Http404("No Node matches the given query.")
        result = services.latest_result(name)
        if result is None:
            raise Http404(f"node {name} has not been attested yet")
        try:
            claims = verify_result(result.token, served_keys())
        except (ResultInvalid, published_keys.KeysNotPublished) as invalid:
            return Response({"token": result.token, "claims": None, "verified": False, "detail": str(invalid)})
        return Response({"token": result.token, "claims": claims, "verified": True})


class SigningKeysView(PublicReadView):
    """The JWKS of every key that signed or signs results: verify a result offline with it."""

    @extend_schema(
        responses={
            200: inline_serializer("JWKS", {"keys": serializers.ListField(child=serializers.DictField())}),
            503: ERROR,
        }
    )
    def get(self, request):
        try:
            return Response(served_keys())
        except published_keys.KeysNotPublished as missing:
            return Response({"detail": f"the signing keys are not published: {missing}"}, status=503)
