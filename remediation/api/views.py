import logging

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, generics, permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import SizeLimitedJSONParser
from core.error_schema import ERROR
from fleet.models import Node, NodeState
from remediation import rules, services
from remediation.api.authentication import AlertmanagerAuthentication, IsAlertmanager
from remediation.models import Remediation
from remediation.targets import scrape_target

log = logging.getLogger(__name__)


class AlertPayloadParser(SizeLimitedJSONParser):
    limit_setting = "ALERT_MAX_BODY_BYTES"
    # rules.parse_webhook checks the text of each alert on its own: one bad alert must not cost
    # the batch the others.
    checks_text = False


def _labels(**options) -> serializers.DictField:
    return serializers.DictField(child=serializers.CharField(allow_blank=True), **options)


def _alert_status() -> serializers.RegexField:
    # A pattern, not an enum: drf-spectacular would name it after the field, as it does the
    # remediations' own `status`, and warn of the collision (check --deploy fails on warnings).
    return serializers.RegexField(f"^({'|'.join(rules.STATUSES)})$")


# What Alertmanager posts (rules.parse_webhook is the strict reading): documented, so that
# generated clients and schemathesis send alerts, not any object.
ALERTMANAGER_PAYLOAD = inline_serializer(
    "AlertmanagerPayload",
    {
        "version": serializers.ChoiceField(choices=["4"]),
        "status": _alert_status(),
        "receiver": serializers.CharField(),
        "groupKey": serializers.CharField(),
        "truncatedAlerts": serializers.IntegerField(min_value=0, required=False),
        "groupLabels": _labels(required=False),
        "commonLabels": _labels(required=False),
        "commonAnnotations": _labels(required=False),
        "externalURL": serializers.CharField(required=False),
        "alerts": serializers.ListField(
            max_length=rules.MAX_ALERTS,
            child=inline_serializer(
                "AlertmanagerAlert",
                {
                    "status": _alert_status(),
                    "labels": _labels(),
                    "annotations": _labels(required=False),
                    "startsAt": serializers.DateTimeField(),
                    "endsAt": serializers.DateTimeField(),
                    "generatorURL": serializers.CharField(required=False),
                    "fingerprint": serializers.RegexField(f"^{rules.FINGERPRINT.pattern}$"),
                },
            ),
        ),
    },
)
ALERTS_RECEIVED = inline_serializer(
    "AlertsReceived",
    {
        "received": serializers.IntegerField(help_text="alerts in the payload"),
        "remediations": serializers.ListField(child=serializers.DictField(), help_text="one per accepted alert"),
        "refused": serializers.ListField(
            child=serializers.DictField(), help_text="one per refused alert: index, fingerprint, detail"
        ),
    },
)


class AlertmanagerWebhookView(APIView):
    """POST /v1/alerts/alertmanager: Alertmanager's webhook (payload version 4).

    A malformed payload is a 400. Within a well-formed one each alert stands alone: the good
    ones are acted on and the bad ones are listed under `refused`, with a 207. It must be a
    2xx: Alertmanager retries a 5xx, and on any answer but a 2xx (a 4xx too) it records the
    notification as failed and sends the whole group again at its next group_interval (1 s
    here) for as long as the alerts fire, so one alert that can never be accepted would
    resend the good ones for ever. A refused alert is logged, for the operators to see."""

    authentication_classes = [AlertmanagerAuthentication]
    permission_classes = [IsAlertmanager]
    parser_classes = [AlertPayloadParser]

    @extend_schema(
        request=ALERTMANAGER_PAYLOAD,
        responses={200: ALERTS_RECEIVED, 207: ALERTS_RECEIVED, 400: ERROR, 401: ERROR, 413: ERROR},
    )
    def post(self, request):
        try:
            parsed = rules.parse_webhook(request.data)
        except rules.PayloadError as error:
            raise exceptions.ValidationError({"payload": [str(error)]}) from error
        refused = [entry for entry in parsed if isinstance(entry, rules.RefusedAlert)]
        for refusal in refused:
            log.warning("refused alert %d (fingerprint %s): %s", refusal.index, refusal.fingerprint, refusal.reason)
        done = services.receive_alerts([entry for entry in parsed if isinstance(entry, rules.Alert)])
        return Response(
            {
                "received": len(parsed),
                "remediations": [{"id": r.pk, "status": r.status} for r in done],
                "refused": [{"index": r.index, "fingerprint": r.fingerprint, "detail": r.reason} for r in refused],
            },
            status=status.HTTP_207_MULTI_STATUS if refused else status.HTTP_200_OK,
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
