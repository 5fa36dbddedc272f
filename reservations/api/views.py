from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, permissions, serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.error_schema import ERROR
from core.parsing import InvalidInput, parse_int
from fleet import services as fleet_services
from reservations import access, selectors, services, webhooks
from reservations.api import idempotency
from reservations.api.serializers import (
    CapacitySerializer,
    NewWebhookSerializer,
    NodeReportSerializer,
    PlacementRefusalSerializer,
    QuotaSerializer,
    ReinstallSerializer,
    ReservationChangeSerializer,
    ReservationRequestSerializer,
    ReservationSerializer,
    SSHKeyRequestSerializer,
    SSHKeySerializer,
    WebhookDeliverySerializer,
    WebhookRequestSerializer,
    WebhookSerializer,
)
from reservations.api.usage_serializers import UsageRequestSerializer, UsageSerializer
from reservations.models import Reservation, SSHKey, Tenant, Webhook
from reservations.placement import PlacementRefused
from reservations.services.api_keys import Caller
from reservations.ssh_keys import BadKey


class IsTenant(permissions.BasePermission):
    """An organisation's key, whose role allows what the request does: a read (any safe method),
    a use (reserve, change, release, act on nodes), or, where the view says `administers`, the
    organisation's own administration (members, invitations, keys, webhooks, SSH keys)."""

    message = "this key may not do this"

    def has_permission(self, request, view):
        caller = request.auth
        if not isinstance(caller, Caller):
            return False
        if request.method in permissions.SAFE_METHODS:
            action = access.Action.READ
        else:
            action = access.Action.ADMINISTER if getattr(view, "administers", False) else access.Action.USE
        if not access.allows(caller.role, action):
            self.message = f"this key acts as {caller.role.value}, which may not {action.value} here"
            return False
        return True


def caller_of(request: Request) -> Caller:
    """Who the request acts for, which IsTenant made sure of."""
    caller = request.auth
    assert isinstance(caller, Caller)
    return caller


def _tenant(request: Request) -> Tenant:
    """The caller's organisation, which IsTenant made sure of."""
    return caller_of(request).tenant


def _reservation_answer(reservations, *, many=False):
    rows = list(reservations) if many else [reservations]
    context = {
        "nodes": selectors.reservation_nodes(rows),
        "machines": selectors.reservation_machines(rows),
        "ssh_keys": selectors.reservation_ssh_keys(rows),
    }
    return ReservationSerializer(rows if many else reservations, many=many, context=context).data


class ReservationListView(generics.GenericAPIView):
    """GET: the caller's reservations, newest first. POST: reserve nodes (201), or 409 with the
    reason; a retry under the same Idempotency-Key gets the first answer again."""

    permission_classes = [IsTenant]
    serializer_class = ReservationSerializer

    def get_queryset(self):
        return Reservation.objects.filter(tenant=_tenant(self.request)).select_related("pod", "image")

    @extend_schema(operation_id="reservations_list")
    def get(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(_reservation_answer(page, many=True))

    @extend_schema(
        request=ReservationRequestSerializer,
        parameters=[idempotency.PARAMETER],
        responses={
            201: ReservationSerializer,
            400: ERROR,
            403: ERROR,
            409: PlacementRefusalSerializer,
            422: ERROR,
            429: ERROR,
        },
    )
    def post(self, request):
        key = idempotency.key_of(request)
        caller = caller_of(request)
        tenant = caller.tenant
        wanted = ReservationRequestSerializer(data=request.data, context={"tenant": tenant})
        wanted.is_valid(raise_exception=True)

        def create() -> Response:
            try:
                reservation = services.create_reservation(
                    tenant=tenant, actor=f"tenant:{tenant.name}", now=caller.read_at, **wanted.validated_data
                )
            except PlacementRefused as refused:  # an answer here, not an error: a retry may replay it
                refusal = {"detail": refused.reason, "offer": refused.offer}
                return Response(PlacementRefusalSerializer(refusal).data, status=status.HTTP_409_CONFLICT)
            return Response(_reservation_answer(reservation), status=status.HTTP_201_CREATED)

        if key is None:
            return create()
        return idempotency.answer_once(tenant=tenant, key=key, body=request.data, answer=create)


class ReservationDetailView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(responses={200: ReservationSerializer, 404: ERROR, 429: ERROR})
    def get(self, request, pk: int):
        # Another tenant's reservation is answered exactly like one that does not exist.
        reservation = get_object_or_404(Reservation, pk=pk, tenant=_tenant(request))
        return Response(_reservation_answer(reservation))

    @extend_schema(
        request=ReservationChangeSerializer,
        responses={200: ReservationSerializer, 400: ERROR, 403: ERROR, 404: ERROR, 409: ERROR, 429: ERROR},
    )
    def patch(self, request, pk: int):
        """Extend or shorten the reservation (`ends_at`), grow it (`node_count`) or give nodes back."""
        tenant = _tenant(request)
        reservation = get_object_or_404(Reservation, pk=pk, tenant=tenant)
        wanted = ReservationChangeSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        changed = services.change_reservation(
            reservation_id=reservation.pk,
            tenant=tenant,
            actor=f"tenant:{tenant.name}",
            **wanted.validated_data,
        )
        return Response(_reservation_answer(changed))


class ReservationReleaseView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(request=None, responses={200: ReservationSerializer, 404: ERROR, 429: ERROR})
    def post(self, request, pk: int):
        tenant = _tenant(request)
        reservation = get_object_or_404(Reservation, pk=pk, tenant=tenant)
        released = services.release_reservation(
            reservation_id=reservation.pk, actor=f"tenant:{tenant.name}", reason="released by tenant"
        )
        return Response(_reservation_answer(released))


# Per depth, the selector's kept capacity answer (the very list) and it as JSON: a read of an
# unchanged fleet sends the same bytes instead of serializing thousands of domains again.
_capacity_json: dict[int, tuple[list[dict], bytes]] = {}


DEPTH = OpenApiParameter(
    "depth",
    {"type": "integer", "minimum": 0},
    description=(
        "How many fabric levels of `domains` to list below each pod: 0 lists none, 1 the level under the pod "
        "(its leaves, say), and so on down to the racks (`nvlink_domain`); a domain at the cut has its `nodes` "
        'and `available` and `"children": []`. Default: every level while the fleet has at most 2,000 racks, '
        "else the deepest that lists at most 1,000 domains. The answer's `depth` says which it used."
    ),
)


class CapacityView(APIView):
    """Free nodes now, and whole free racks (whole NVLink domains), per pod, with its fabric
    domains `depth` levels down."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]

    @extend_schema(parameters=[DEPTH], responses={200: CapacitySerializer, 400: ERROR})
    def get(self, request):
        depth = request.query_params.get("depth")
        try:
            wanted = None if depth is None else parse_int(depth, minimum=0)
        except InvalidInput as error:
            raise serializers.ValidationError({"depth": [str(error)]}) from error
        answer = selectors.capacity_listing(depth=wanted)
        # Of CapacitySerializer's shape already, as plain lists and dicts: rendered as it is, for a
        # serializer would take milliseconds over thousands of domains.
        data = {"pods": answer.pods, "depth": answer.depth}
        if request.accepted_media_type != JSONRenderer.media_type:  # such as "application/json; indent=2"
            return Response(data)
        kept = _capacity_json.get(answer.depth)
        if kept is None or kept[0] is not answer.pods:
            kept = (answer.pods, JSONRenderer().render(data))
            _capacity_json[answer.depth] = kept
        return HttpResponse(kept[1], content_type=JSONRenderer.media_type)


class SSHKeyListView(generics.GenericAPIView):
    """GET: the caller's SSH public keys. POST: add one (201); a reservation names keys by id."""

    permission_classes = [IsTenant]
    administers = True
    serializer_class = SSHKeySerializer

    def get_queryset(self):
        return SSHKey.objects.filter(tenant=_tenant(self.request)).order_by("name")

    def get(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(SSHKeySerializer(page, many=True).data)

    @extend_schema(request=SSHKeyRequestSerializer, responses={201: SSHKeySerializer, 400: ERROR, 409: ERROR})
    def post(self, request):
        wanted = SSHKeyRequestSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        try:
            key = services.add_ssh_key(tenant=_tenant(request), **wanted.validated_data)
        except BadKey as bad:
            raise serializers.ValidationError({"public_key": [str(bad)]}) from bad
        return Response(SSHKeySerializer(key).data, status=status.HTTP_201_CREATED)


class SSHKeyDetailView(APIView):
    permission_classes = [IsTenant]
    administers = True

    @extend_schema(responses={204: None, 404: ERROR})
    def delete(self, request, pk: int):
        """Forget the key: new reservations cannot name it; nodes that have it keep it until released."""
        if not services.delete_ssh_key(tenant=_tenant(request), key_id=pk):
            raise Http404
        return Response(status=status.HTTP_204_NO_CONTENT)


def _serving_node(request, pk: int, name: str):
    node = services.serving_node(reservation_id=pk, tenant=_tenant(request), name=name)
    if node is None:
        raise Http404
    return node


class NodeReportView(APIView):
    """ "This node is broken": the node leaves the reservation for the operators to look at, and a
    replacement is placed in the same pod at once (202, the reservation as it is now)."""

    permission_classes = [IsTenant]

    @extend_schema(
        request=NodeReportSerializer, responses={202: ReservationSerializer, 400: ERROR, 404: ERROR, 429: ERROR}
    )
    def post(self, request, pk: int, name: str):
        node = _serving_node(request, pk, name)
        report = NodeReportSerializer(data=request.data)
        report.is_valid(raise_exception=True)
        services.report_node(node=node, tenant=_tenant(request), **report.validated_data)
        reservation = Reservation.objects.get(pk=pk)
        return Response(_reservation_answer(reservation), status=status.HTTP_202_ACCEPTED)


class NodePowerView(APIView):
    """Reboot (graceful, forced if the OS does not restart in time) or power-cycle one of the
    caller's active nodes through its BMC: 202 once asked, audited; a few an hour per node."""

    permission_classes = [IsTenant]
    action = ""

    @extend_schema(request=None, responses={202: ERROR, 404: ERROR, 409: ERROR, 429: ERROR})
    def post(self, request, pk: int, name: str):
        node = _serving_node(request, pk, name)
        fleet_services.request_power_action(
            node_id=node.pk, action=self.action, actor=f"tenant:{_tenant(request).name}"
        )
        return Response({"detail": f"{self.action} of {node.name} asked of its BMC"}, status=status.HTTP_202_ACCEPTED)


class NodeReinstallView(APIView):
    """Provision one of the caller's active nodes again, with another image if named, keeping it in
    the reservation: its drives are erased first (202; the node is back once active again)."""

    permission_classes = [IsTenant]

    @extend_schema(
        request=ReinstallSerializer, responses={202: ReservationSerializer, 400: ERROR, 404: ERROR, 409: ERROR}
    )
    def post(self, request, pk: int, name: str):
        node = _serving_node(request, pk, name)
        wanted = ReinstallSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        fleet_services.request_reinstall(
            node_id=node.pk, image=wanted.validated_data["image"], actor=f"tenant:{_tenant(request).name}"
        )
        return Response(_reservation_answer(Reservation.objects.get(pk=pk)), status=status.HTTP_202_ACCEPTED)


class WebhookListView(generics.GenericAPIView):
    """GET: the caller's webhooks (no secrets). POST: add one (201, with its secret, shown only now)."""

    permission_classes = [IsTenant]
    administers = True
    serializer_class = WebhookSerializer

    def get(self, request):
        page = self.paginate_queryset(Webhook.objects.filter(tenant=_tenant(request)).order_by("id"))
        return self.get_paginated_response(WebhookSerializer(page, many=True).data)

    @extend_schema(request=WebhookRequestSerializer, responses={201: NewWebhookSerializer, 400: ERROR})
    def post(self, request):
        wanted = WebhookRequestSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        webhook = webhooks.create_webhook(tenant=_tenant(request), **wanted.validated_data)
        return Response(NewWebhookSerializer(webhook).data, status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    permission_classes = [IsTenant]
    administers = True

    @extend_schema(responses={204: None, 404: ERROR})
    def delete(self, request, pk: int):
        webhooks.delete_webhook(tenant=_tenant(request), webhook_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookDeliveryListView(generics.GenericAPIView):
    """What was sent to one of the caller's webhooks, newest first: each delivery's state, attempts
    and the receiver's last answer."""

    permission_classes = [IsTenant]
    serializer_class = WebhookDeliverySerializer

    def get(self, request, pk: int):
        webhook = get_object_or_404(Webhook, pk=pk, tenant=_tenant(request))
        page = self.paginate_queryset(webhook.deliveries.order_by("-created_at", "-id"))
        return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)


class WebhookRedeliveryView(APIView):
    permission_classes = [IsTenant]
    administers = True

    @extend_schema(request=None, responses={202: WebhookDeliverySerializer, 404: ERROR})
    def post(self, request, pk: int, delivery: int):
        """Send a delivery again now (a receiver that was down, or lost it)."""
        again = webhooks.redeliver(tenant=_tenant(request), webhook_id=pk, delivery_id=delivery)
        return Response(WebhookDeliverySerializer(again).data, status=status.HTTP_202_ACCEPTED)


class QuotaView(APIView):
    """What the caller may hold (an empty limit: none beyond the fleet's) and holds now."""

    permission_classes = [IsTenant]

    @extend_schema(responses={200: QuotaSerializer})
    def get(self, request):
        return Response(QuotaSerializer(selectors.quota_of(_tenant(request))).data)


class UsageView(APIView):
    """Node-seconds per reservation between `from` and `to` (default: this month so far), their
    total and the totals per calendar month: only time the nodes were up counts as active."""

    permission_classes = [IsTenant]

    @extend_schema(parameters=[UsageRequestSerializer], responses={200: UsageSerializer, 400: ERROR})
    def get(self, request):
        window = UsageRequestSerializer(data=request.query_params)
        window.is_valid(raise_exception=True)
        return Response(UsageSerializer(selectors.usage_of(_tenant(request), **window.validated_data)).data)
