import logging

from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
from rest_framework import generics, permissions, serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.validators import ProhibitSurrogateCharactersValidator
from rest_framework.views import APIView

from core.api import SizeLimitedJSONParser, StrictIntegerField
from core.error_schema import ERROR
from core.prometheus_auth import IsPrometheusOrOperator, PrometheusAuthentication
from core.validation import Invalid
from fleet.models import Node, NodeState
from remediation import rules, services
from remediation.api.authentication import (
    AlertmanagerAuthentication,
    IsAlertmanager,
    IsNodeAgent,
    NodeAgentAuthentication,
)
from remediation.api.throttles import AgentXidReportThrottle
from remediation.models import Remediation
from remediation.targets import scrape_target

log = logging.getLogger(__name__)


class AlertPayloadParser(SizeLimitedJSONParser):
    limit_setting = "ALERT_MAX_BODY_BYTES"
    # rules.parse_alerts checks the text of each alert on its own: one bad alert must not cost
    # the batch the others.
    checks_text = False


class _Text(serializers.CharField):
    """A JSON string, taken as sent: DRF's CharField would turn 7 into "7" and trim spaces. Nor is a
    NUL character or a lone surrogate refused: the envelope is not kept, and a 400 would make
    Alertmanager resend the group's good alerts for ever (each alert's own text: rules.parse_alerts)."""

    def __init__(self, *, choices: tuple[str, ...] = (), **kwargs):
        super().__init__(trim_whitespace=False, **kwargs)
        unstorable = ProhibitNullCharactersValidator | ProhibitSurrogateCharactersValidator
        self.validators = [v for v in self.validators if not isinstance(v, unstorable)]
        if choices:
            # A pattern, not an enum: drf-spectacular would name it after the field, as it does the
            # remediations' own `status`, and warn of the collision (check --deploy fails on warnings).
            words = f"must be one of {', '.join(choices)}"
            self.validators.append(RegexValidator(rf"\A({'|'.join(choices)})\Z", message=words))

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return data


class _Pairs(serializers.DictField):
    """Labels or annotations, read by the rules that read each alert's (`read`)."""

    def __init__(self, read, **kwargs):
        super().__init__(child=serializers.CharField(allow_blank=True), required=False, **kwargs)
        self.read = read

    def to_internal_value(self, data):
        try:
            return self.read(data, "")
        except Invalid as error:
            raise serializers.ValidationError(
                {error.path: [error.problem]} if error.path else [error.problem]
            ) from None


# Documents each alert, so that generated clients and schemathesis send alerts, not any object.
ALERTMANAGER_ALERT = inline_serializer(
    "AlertmanagerAlert",
    {
        "status": _Text(choices=rules.STATUSES),
        "labels": serializers.DictField(child=serializers.CharField(allow_blank=True)),
        "annotations": serializers.DictField(child=serializers.CharField(allow_blank=True), required=False),
        "startsAt": serializers.DateTimeField(),
        "endsAt": serializers.DateTimeField(),
        "generatorURL": serializers.CharField(required=False),
        "fingerprint": serializers.RegexField(f"^{rules.FINGERPRINT.pattern}$"),
    },
)


@extend_schema_field(serializers.ListField(child=ALERTMANAGER_ALERT, max_length=rules.MAX_ALERTS))
class _Alerts(serializers.ListField):
    """The alerts as sent: rules.parse_alerts reads each on its own, so that a malformed one is refused alone."""


class AlertmanagerPayloadSerializer(serializers.Serializer):
    """Alertmanager's webhook payload, version 4. Fields it may add within version 4 are ignored
    (it added `truncatedAlerts` without a new version)."""

    version = _Text(choices=("4",))
    status = _Text(choices=rules.STATUSES)
    receiver = _Text(allow_blank=True, max_length=rules.MAX_TEXT)
    groupKey = _Text(allow_blank=True, max_length=rules.MAX_TEXT)
    truncatedAlerts = StrictIntegerField(min_value=0, required=False)
    groupLabels = _Pairs(rules.label_set)
    commonLabels = _Pairs(rules.label_set)
    commonAnnotations = _Pairs(rules.annotation_set)
    externalURL = _Text(allow_blank=True, max_length=rules.MAX_TEXT, required=False)
    alerts = _Alerts(max_length=rules.MAX_ALERTS)


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
        request=AlertmanagerPayloadSerializer,
        responses={200: ALERTS_RECEIVED, 207: ALERTS_RECEIVED, 400: ERROR, 401: ERROR, 413: ERROR},
    )
    def post(self, request):
        payload = AlertmanagerPayloadSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        parsed = rules.parse_webhook(payload.validated_data)
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


class AgentXidReportSerializer(serializers.Serializer):
    gpu = StrictIntegerField(min_value=0, max_value=999)
    xid = StrictIntegerField(min_value=1, max_value=65535)
    occurrence = StrictIntegerField(
        min_value=1, help_text="The agent's count of this XID on this GPU, this one included."
    )
    seen_at = serializers.CharField(help_text="RFC 3339: when the agent saw it; with `occurrence`, the report's key.")


AGENT_XID_REPORT_RECEIVED = inline_serializer(
    "AgentXidReportReceived",
    {"remediation": serializers.IntegerField(), "status": serializers.CharField(), "step": serializers.CharField()},
)


class AgentXidReportView(APIView):
    """POST /v1/agents/{node}/xids: the node's agent reports an XID the moment it sees it, with the
    node's agent token. 202 when acted on (or recorded) now; 200 for a repeat of a report already
    received (same gpu, xid, occurrence and seen_at), with the first answer. Alertmanager's alert
    for the same occurrence, arriving later, is recorded and not acted on again. While a tenant
    holds the node a report is the tenant's word, spending its budget, not the fleet's cap
    (remediation/blast_radius.py). At most GPUFLEET_AGENT_XID_REPORT_RATE per node: then 429 with
    Retry-After."""

    authentication_classes = [NodeAgentAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [AgentXidReportThrottle]

    @extend_schema(
        request=AgentXidReportSerializer,
        responses={
            200: AGENT_XID_REPORT_RECEIVED,
            202: AGENT_XID_REPORT_RECEIVED,
            400: ERROR,
            401: ERROR,
            429: ERROR,
        },
    )
    def post(self, request, node):
        report = AgentXidReportSerializer(data=request.data)
        report.is_valid(raise_exception=True)
        try:
            remediation, new = services.receive_agent_report(node=request.auth, **report.validated_data)
        except Invalid as error:
            raise serializers.ValidationError({error.path: [error.problem]}) from None
        return Response(
            {"remediation": remediation.pk, "status": remediation.status, "step": remediation.step},
            status=status.HTTP_202_ACCEPTED if new else status.HTTP_200_OK,
        )


class RemediationSerializer(serializers.ModelSerializer):
    node: serializers.SlugRelatedField[Node] = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Remediation
        fields = ["id", "node", "gpu", "action", "step", "mode", "reason", "status", "alert", "at"]


class RemediationListView(generics.ListAPIView):
    """Every alert acted on, or not: applied, suppressed by the cap, or calling for nothing."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    serializer_class = RemediationSerializer
    queryset = Remediation.objects.select_related("node")


class PrometheusAuthenticationScheme(OpenApiAuthenticationExtension):
    """Declares Prometheus's bearer scheme in /v1/schema, so generated clients and fuzzers send it."""

    target_class = PrometheusAuthentication
    name = "prometheusBearerAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")


class PrometheusTargetsView(APIView):
    """Prometheus HTTP service discovery: one target per node agent, labelled with its place.

    Only nodes whose agent should be answering are listed (available, or serving a tenant): a
    node that workflows power-cycle, or that sits powered off in quarantine, must not look like
    a dead agent to NodeAgentDown. Prometheus reads it with its bearer token; an operator's
    browser with the session: it lists every agent's address."""

    authentication_classes = [PrometheusAuthentication, SessionAuthentication]
    permission_classes = [IsPrometheusOrOperator]

    @extend_schema(responses={200: OpenApiTypes.OBJECT, 401: ERROR, 403: ERROR})
    def get(self, request):
        nodes = (
            Node.objects.filter(state__in=[NodeState.AVAILABLE, NodeState.ACTIVE])
            .exclude(agent_url="")
            .select_related("rack__pod")
            .order_by("name")
        )
        return Response([scrape_target(n.name, n.agent_url, pod=n.rack.pod.name, rack=n.rack.name) for n in nodes])
