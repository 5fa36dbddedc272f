import hmac

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, generics, permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet.models import Node, NodeState
from gpufleet.api import SizeLimitedJSONParser
from gpufleet.schema import ERROR
from remediation import rules, services
from remediation.models import Remediation
from remediation.targets import scrape_target


class AlertPayloadParser(SizeLimitedJSONParser):
    limit_setting = "ALERT_MAX_BODY_BYTES"


class AlertmanagerToken(permissions.BasePermission):
    """Alertmanager's bearer token, compared in constant time."""

    def has_permission(self, request, view):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), settings.GPUFLEET_WEBHOOK_TOKEN.encode()
        ):
            raise exceptions.AuthenticationFailed("a valid bearer token is required")
        return True


class AlertmanagerWebhookView(APIView):
    """POST /v1/alerts/alertmanager: Alertmanager's webhook (payload version 4)."""

    authentication_classes = []
    permission_classes = [AlertmanagerToken]
    parser_classes = [AlertPayloadParser]

    def get_authenticate_header(self, request):
        return 'Bearer realm="alertmanager"'

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            200: inline_serializer(
                "AlertsReceived",
                {
                    "received": serializers.IntegerField(),
                    "remediations": serializers.ListField(child=serializers.DictField()),
                },
            ),
            400: ERROR,
            401: ERROR,
            413: ERROR,
        },
    )
    def post(self, request):
        try:
            alerts = rules.parse_webhook(request.data)
        except rules.PayloadError as error:
            raise exceptions.ValidationError({"payload": [str(error)]}) from error
        done = services.receive_alerts(alerts)
        return Response(
            {"received": len(alerts), "remediations": [{"id": r.pk, "status": r.status} for r in done]},
            status=status.HTTP_200_OK,
        )


class RemediationSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Remediation
        fields = ["id", "node", "gpu", "action", "reason", "status", "alert", "at"]


class RemediationListView(generics.ListAPIView):
    """Every alert acted on, or not: applied, suppressed by the cap, or calling for nothing."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    serializer_class = RemediationSerializer
    queryset = Remediation.objects.select_related("node")


class PrometheusTargetsView(APIView):
    """Prometheus HTTP service discovery: one target per node agent, labelled with its place.

    Only nodes whose agent should be answering are listed (available, or serving a tenant): a
    node that workflows power-cycle, or that sits powered off in quarantine, must not look like
    a dead agent to NodeAgentDown."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        nodes = (
            Node.objects.filter(state__in=[NodeState.AVAILABLE, NodeState.ACTIVE])
            .exclude(agent_url="")
            .select_related("rack__pod")
            .order_by("name")
        )
        return Response([scrape_target(n.name, n.agent_url, pod=n.rack.pod.name, rack=n.rack.name) for n in nodes])
