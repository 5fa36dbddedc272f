from django.http import Http404
from drf_spectacular.utils import extend_schema, inline_serializer
from gpufleet_client.offline_verification import ResultInvalid, verify_result
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from attestation import services
from core.error_schema import ERROR


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
            claims = verify_result(result.token, services.public_keys())
        except ResultInvalid as invalid:
            return Response({"token": result.token, "claims": None, "verified": False, "detail": str(invalid)})
        return Response({"token": result.token, "claims": claims, "verified": True})


class SigningKeysView(PublicReadView):
    """The JWKS of every key that signed or signs results: verify a result offline with it."""

    @extend_schema(responses=inline_serializer("JWKS", {"keys": serializers.ListField(child=serializers.DictField())}))
    def get(self, request):
        return Response(services.public_keys())
