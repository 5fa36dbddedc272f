from rest_framework import serializers

from core.api import StrictBooleanField, StrictInputSerializer, StrictIntegerField
from fleet.models import Pod
from reservations.models import Reservation

MAX_NODES_PER_RESERVATION = 10_000


class ReservationRequestSerializer(StrictInputSerializer):
    node_count = StrictIntegerField(min_value=1, max_value=MAX_NODES_PER_RESERVATION)
    pod = serializers.SlugRelatedField(
        slug_field="name", queryset=Pod.objects.all(), required=False, allow_null=True, default=None
    )
    rack_scale = StrictBooleanField(required=False, default=False)
    # The period's rules are the service's, applied on its own clock (reservations/periods.py).
    starts_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Default now; a past time means now. At most the booking horizon ahead (90 days by default).",
    )
    ends_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="After the start, by at most the maximum duration (30 days by default). Required for a start "
        "more than a minute from now; without it the reservation lasts the maximum duration, unless released.",
    )


class ReservationSerializer(serializers.ModelSerializer):
    pod = serializers.SlugRelatedField(slug_field="name", read_only=True)
    nodes = serializers.SerializerMethodField()

    class Meta:
        model = Reservation
        fields = [
            "id",
            "state",
            "node_count",
            "pod",
            "rack_scale",
            "nodes",
            "starts_at",
            "ends_at",
            "reason",
            "placement",
            "created_at",
        ]
        read_only_fields = fields

    def get_nodes(self, reservation) -> list[str]:
        return self.context["nodes"].get(reservation.pk, [])


class PodCapacitySerializer(serializers.Serializer):
    name = serializers.CharField()
    nodes = serializers.IntegerField()
    available = serializers.IntegerField(help_text="Nodes free now.")
    available_open_ended = serializers.IntegerField(
        help_text="Nodes free now that no later booking holds within the maximum duration: "
        "what a reservation without ends_at can get."
    )
    whole_free_racks = serializers.IntegerField()


class CapacitySerializer(serializers.Serializer):
    pods = PodCapacitySerializer(many=True)
