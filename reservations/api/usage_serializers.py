"""GET /v1/usage's query and answer: node-seconds per reservation, per member, per month, in total."""

from datetime import timedelta

from rest_framework import serializers

from core import clock
from core.api import StrictInputSerializer
from reservations import usage

USAGE_WINDOW_DAYS = 400  # a year and a bit: a window any invoice needs, and a bound on the work


class FromFieldMixin(serializers.Serializer):
    """Declares `from_` and names it `from`: a Python keyword, as a query parameter and a key."""

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class UsageRequestSerializer(FromFieldMixin, StrictInputSerializer):
    from_ = serializers.DateTimeField(required=False, help_text="Default: the start of this calendar month (UTC).")
    to = serializers.DateTimeField(required=False, help_text="Default and at most: now.")

    def validate(self, attrs):
        now = clock.now()
        start = attrs.get("from") or usage.calendar_month(now).start
        end = min(attrs.get("to") or now, now)
        if start >= end:
            raise serializers.ValidationError({"from": ["must be before to (and before now)"]})
        if end - start > timedelta(days=USAGE_WINDOW_DAYS):
            raise serializers.ValidationError({"from": [f"at most {USAGE_WINDOW_DAYS} days before to"]})
        # usage_of's arguments: `now` with them, so that the request reads the clock once.
        return {"start": start, "end": end, "now": now}


class UsageFiguresSerializer(serializers.Serializer):
    node_seconds_active = serializers.IntegerField(
        help_text="Node-seconds the nodes were up for the reservation while it was whole."
    )
    node_seconds_degraded = serializers.IntegerField(
        help_text="Node-seconds the nodes were up while the reservation missed a node."
    )
    node_seconds_replacement = serializers.IntegerField(
        help_text="Node-seconds replacement nodes were held before they were up."
    )


class ReservationUsageSerializer(UsageFiguresSerializer):
    reservation = serializers.IntegerField()
    user = serializers.CharField(
        help_text="The member who made the reservation (empty for one made before organisations had members)."
    )


class MemberUsageSerializer(UsageFiguresSerializer):
    user = serializers.CharField(help_text="A member (or the organisation's own account, for its keys).")


class MonthUsageSerializer(UsageFiguresSerializer):
    month = serializers.CharField(help_text="YYYY-MM, UTC.")


class UsageSerializer(FromFieldMixin, serializers.Serializer):
    from_ = serializers.DateTimeField()
    to = serializers.DateTimeField()
    results = ReservationUsageSerializer(many=True)
    total = UsageFiguresSerializer()
    months = MonthUsageSerializer(many=True)
    members = MemberUsageSerializer(many=True, help_text="The totals per member who made the reservations.")
