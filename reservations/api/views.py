from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, permissions, status
from rest_framework.response import Response
from rest_framework.views import APIView

from gpufleet.schema import ERROR
from reservations import selectors, services
from reservations.api.serializers import CapacitySerializer, ReservationRequestSerializer, ReservationSerializer
from reservations.models import Reservation


class IsTenant(permissions.BasePermission):
    message = "this token belongs to no tenant"

    def has_permission(self, request, view):
        return bool(request.user and request.user.is_authenticated and hasattr(request.user, "tenant"))


def _reservation_answer(reservations, *, many=False):
    rows = list(reservations) if many else [reservations]
    context = {"nodes": selectors.reservation_nodes(rows)}
    return ReservationSerializer(rows if many else reservations, many=many, context=context).data


class ReservationListView(generics.GenericAPIView):
    """GET: the caller's reservations, newest first. POST: reserve nodes (201), or 409 with the reason."""

    permission_classes = [IsTenant]
    serializer_class = ReservationSerializer

    def get_queryset(self):
        return Reservation.objects.filter(tenant=self.request.user.tenant).select_related("pod")

    @extend_schema(operation_id="reservations_list")
    def get(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(_reservation_answer(page, many=True))

    @extend_schema(request=ReservationRequestSerializer, responses={201: ReservationSerializer, 409: ERROR})
    def post(self, request):
        wanted = ReservationRequestSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        reservation = services.create_reservation(
            tenant=request.user.tenant, actor=f"tenant:{request.user.tenant.name}", **wanted.validated_data
        )
        return Response(_reservation_answer(reservation), status=status.HTTP_201_CREATED)


class ReservationDetailView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(responses={200: ReservationSerializer, 404: ERROR})
    def get(self, request, pk: int):
        # Another tenant's reservation is answered exactly like one that does not exist.
        reservation = get_object_or_404(Reservation, pk=pk, tenant=request.user.tenant)
        return Response(_reservation_answer(reservation))


class ReservationReleaseView(APIView):
    permission_classes = [IsTenant]

    @extend_schema(request=None, responses={200: ReservationSerializer, 404: ERROR})
    def post(self, request, pk: int):
        reservation = get_object_or_404(Reservation, pk=pk, tenant=request.user.tenant)
        released = services.release_reservation(
            reservation_id=reservation.pk, actor=f"tenant:{request.user.tenant.name}", reason="released by tenant"
        )
        return Response(_reservation_answer(released))


class CapacityView(APIView):
    """Free nodes now, and whole free racks (whole NVLink domains), per pod."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]

    @extend_schema(responses=CapacitySerializer)
    def get(self, request):
        return Response(CapacitySerializer({"pods": selectors.capacity_by_pod()}).data)
