from django.utils import timezone
from rest_framework import serializers

from fleet.models import Pod
from gpufleet.api import StrictBooleanField, StrictInputSerializer, StrictIntegerField
from reservations.models import Reservation

MAX_NODES_PER_RESERVATION = 10_000


class ReservationRequestSerializer(StrictInputSerializer):
    node_count = StrictIntegerField(min_value=1, max_value=MAX_NODES_PER_RESERVATION)
    pod = serializers.SlugRelatedField(
        slug_field="name", queryset=Pod.objects.all(), required=False, allow_null=True, default=None
    )
    rack_scale = StrictBooleanField(required=False, default=False)
    starts_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    ends_at = serializers.DateTimeField(required=False, allow_null=True, default=None)

    def validate(self, data):
        starts_at = data["starts_at"] or timezone.now()
        if data["ends_at"] is not None and data["ends_at"] <= starts_at:
            raise serializers.ValidationError(
                {"ends_at": ["must be after starts_at (or after now, if it is not given)"]}
            )
        return data


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
    available = serializers.IntegerField()
    whole_free_racks = serializers.IntegerField()


class CapacitySerializer(serializers.Serializer):
    pods = PodCapacitySerializer(many=True)
