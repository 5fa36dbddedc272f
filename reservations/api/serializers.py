from collections.abc import Iterable
from typing import cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api import StrictBooleanField, StrictInputSerializer, StrictIntegerField
from core.topology import NVLINK_DOMAIN, POD
from core.validation import Invalid
from fleet.inventory import parse_attributes
from fleet.models import Image, Pod
from fleet.selectors import fabric_levels
from reservations.models import (
    MAX_USER_DATA_BYTES,
    Reservation,
    SSHKey,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    user_data_too_large,
)
from reservations.selectors.answers import networks_of_reservations

MAX_NODES_PER_RESERVATION = 10_000


def image_field(default: str) -> serializers.SlugRelatedField:
    """An image of the catalogue, by name; optional."""
    return serializers.SlugRelatedField(
        slug_field="name",
        queryset=Image.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text=f"A name from GET /v1/images; {default}.",
    )


class TopologyRequestSerializer(StrictInputSerializer):
    # The API's key: DRF's metaclass moves declared fields off the class, so it hides no Field.required.
    required = serializers.CharField(  # type: ignore[assignment]
        required=False,
        default=POD,
        max_length=32,
        help_text="A fabric level (GET /v1/capacity's domains name them): every node is in one domain of it. "
        'Default "pod".',
    )
    preferred = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=32,
        help_text='A deeper level whose domains placement spans as few of as it can, such as "leaf".',
    )


class ReservationRequestSerializer(StrictInputSerializer):
    node_count = StrictIntegerField(min_value=1, max_value=MAX_NODES_PER_RESERVATION)
    pod = serializers.SlugRelatedField(
        slug_field="name", queryset=Pod.objects.all(), required=False, allow_null=True, default=None
    )
    rack_scale = StrictBooleanField(required=False, default=False, help_text='Whole racks: "whole": "nvlink_domain".')
    topology = TopologyRequestSerializer(required=False)
    whole = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=32,
        help_text="A fabric level whose domains are taken whole, every node of each; the count must add up.",
    )
    gpu_model = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=128, help_text="Every node's GPU model."
    )
    attributes = serializers.DictField(
        child=serializers.JSONField(),  # parse_attributes wants strings, and says where one is not
        required=False,
        default=dict,
        help_text='Node attributes the operators define, which every node must have: {"nic": "cx7"}.',
    )
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
    image = image_field("default the catalogue's default image")
    ssh_keys = serializers.PrimaryKeyRelatedField(
        many=True,
        queryset=SSHKey.objects.none(),  # the caller's own keys: see __init__
        required=False,
        default=list,
        help_text="Ids from GET /v1/ssh-keys: the keys that may log in to every node.",
    )
    user_data = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text=f"cloud-init user data (a #cloud-config document or a script), at most {MAX_USER_DATA_BYTES} bytes.",
    )
    wait = StrictBooleanField(
        required=False,
        default=False,
        help_text="If it does not fit now, book it at the earliest period in which it does (the 409's offer): "
        "it is pending until then, and can be released like any reservation.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Another tenant's key id is answered like one that does not exist.
        ssh_keys = self.fields["ssh_keys"]
        assert isinstance(ssh_keys, serializers.ManyRelatedField)  # PrimaryKeyRelatedField(many=True) makes one
        # The stubs type `queryset` with Manager, a descriptor, so any assignment to it reads as a __get__ call.
        ssh_keys.child_relation.queryset = SSHKey.objects.filter(  # type: ignore[arg-type]
            tenant=self.context.get("tenant")
        )

    def validate_user_data(self, value: str) -> str:
        if refusal := user_data_too_large(value):
            raise serializers.ValidationError(refusal)
        return value

    def validate_attributes(self, value: dict) -> dict:
        try:
            return parse_attributes(value, "attributes")
        except Invalid as invalid:
            at = invalid.path.removeprefix("attributes").lstrip(".")
            raise serializers.ValidationError({at: [invalid.problem]} if at else invalid.problem) from invalid

    def validate(self, attrs: dict) -> dict:
        """The levels by name, each one the fleet has; `topology` becomes `required` and `preferred`."""
        topology = attrs.pop("topology", None) or {"required": POD, "preferred": None}
        attrs.update(required=topology["required"], preferred=topology["preferred"])
        if (attrs["required"], attrs["preferred"], attrs["whole"]) == (POD, None, None):
            return attrs  # every fleet has pods: nothing to look up
        levels = fabric_levels()
        for field, level in (("topology.required", attrs["required"]), ("topology.preferred", attrs["preferred"])):
            if level is not None and level not in levels:
                raise serializers.ValidationError({field: [f"no level {level}: the fabric's are {', '.join(levels)}"]})
        whole = attrs["whole"]
        if whole is not None:
            if whole not in levels:
                raise serializers.ValidationError(
                    {"whole": [f"no level {whole}: the fabric's are {', '.join(levels)}"]}
                )
            if levels.index(whole) < levels.index(attrs["required"]):
                raise serializers.ValidationError(
                    {"whole": [f"whole {whole} domains cannot stay inside one {attrs['required']}"]}
                )
        if attrs["rack_scale"] and whole not in (None, NVLINK_DOMAIN):
            raise serializers.ValidationError({"rack_scale": [f'means "whole": "{NVLINK_DOMAIN}", not {whole}']})
        return attrs


class SSHKeyRequestSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=64)
    public_key = serializers.CharField(max_length=16 * 1024, help_text="One OpenSSH public key line.")


class SSHKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = SSHKey
        fields = ["id", "name", "public_key", "fingerprint", "created_at"]
        read_only_fields = fields


class MachineSerializer(serializers.Serializer):
    """A node serving the reservation, as the tenant reaches it."""

    name = serializers.CharField()
    state = serializers.CharField()
    address = serializers.IPAddressField(allow_null=True, help_text="On the tenant network; null until assigned.")
    ssh_port = serializers.IntegerField(allow_null=True)
    host_key_fingerprint = serializers.CharField(allow_null=True, help_text="SHA256:..., once the node reported it.")
    private_address = serializers.IPAddressField(
        allow_null=True, help_text="On the reservation's private Ethernet network; null until assigned."
    )


class NetworkStateSerializer(serializers.Serializer):
    confirmed = serializers.BooleanField(help_text="Every node that should be on it was read back on it.")
    problem = serializers.CharField(
        allow_null=True, help_text="What holds a node back from it, the first of them: the fabric manager's refusal..."
    )


class EthernetNetworkSerializer(NetworkStateSerializer):
    kind = serializers.ChoiceField(choices=["vlan", "vxlan"])
    segment = serializers.IntegerField(help_text="The VLAN, or the VXLAN VNI.")
    vlan = serializers.IntegerField(
        help_text="The VLAN the nodes' leaf ports are in (the segment itself on a VLAN fabric)."
    )
    subnet = serializers.CharField(help_text="CIDR of the private network.")
    gateway = serializers.IPAddressField()


class InfinibandNetworkSerializer(NetworkStateSerializer):
    pkey = serializers.CharField(help_text='The partition key, "0x1001"; the first if it spans several fabrics.')
    pkeys = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Every P_Key, where it spans several fabrics."
    )


class NvlinkNetworkSerializer(NetworkStateSerializer):
    partition = serializers.CharField(help_text="The NVLink partition, one name in every NVLink domain.")


class NetworksSerializer(serializers.Serializer):
    """The reservation's own network on each fabric, which no other tenant's node is on; null: none there."""

    ethernet = EthernetNetworkSerializer(allow_null=True)
    infiniband = InfinibandNetworkSerializer(allow_null=True)
    nvlink = NvlinkNetworkSerializer(allow_null=True)


class TopologySerializer(serializers.Serializer):
    required = serializers.CharField(source="required_level")  # type: ignore[assignment]  # as in the request
    preferred = serializers.CharField(source="preferred_level", allow_null=True)

    def to_representation(self, reservation):
        return {"required": reservation.required_level, "preferred": reservation.preferred_level or None}


class ReservationSerializer(serializers.ModelSerializer):
    pod: "serializers.SlugRelatedField[Pod]" = serializers.SlugRelatedField(slug_field="name", read_only=True)
    topology = TopologySerializer(source="*", read_only=True)
    whole = serializers.CharField(source="whole_level", allow_null=True, read_only=True)
    gpu_model = serializers.CharField(allow_null=True, read_only=True)
    placed_in = serializers.CharField(
        read_only=True, help_text="The domain of the required level that holds its nodes: a pod, a leaf..."
    )
    nodes = serializers.SerializerMethodField()
    image: "serializers.SlugRelatedField[Image]" = serializers.SlugRelatedField(slug_field="name", read_only=True)
    ssh_keys = serializers.SerializerMethodField()
    machines = serializers.SerializerMethodField()
    networks = serializers.SerializerMethodField()

    class Meta:
        model = Reservation
        fields = [
            "id",
            "state",
            "node_count",
            "pod",
            "rack_scale",
            "topology",
            "whole",
            "gpu_model",
            "attributes",
            "placed_in",
            "nodes",
            "machines",
            "networks",
            "image",
            "ssh_keys",
            "starts_at",
            "ends_at",
            "reason",
            "placement",
            "created_at",
        ]
        read_only_fields = fields

    def to_representation(self, reservation):
        answer = super().to_representation(reservation)
        # An empty text is no choice: null, as the request's own default.
        answer["whole"] = answer["whole"] or None
        answer["gpu_model"] = answer["gpu_model"] or None
        return answer

    def get_nodes(self, reservation) -> list[str]:
        return self.context["nodes"].get(reservation.pk, [])

    def get_ssh_keys(self, reservation) -> list[int]:
        return self.context["ssh_keys"].get(reservation.pk, [])

    @extend_schema_field(MachineSerializer(many=True))
    def get_machines(self, reservation) -> list[dict]:
        # many=True makes a ListSerializer, whose data is a list; the stubs know only Serializer's dict.
        return cast(list[dict], MachineSerializer(self.context["machines"].get(reservation.pk, []), many=True).data)

    @extend_schema_field(NetworksSerializer)
    def get_networks(self, reservation) -> dict:
        # Read for every reservation of the answer at once, at the first one: one query for a page.
        context = cast(dict, self.context)  # the root serializer's, shared by every row's
        if "networks" not in context:
            answered = self.root.instance
            context["networks"] = networks_of_reservations(
                list(answered) if isinstance(answered, Iterable) else [reservation]
            )
        return context["networks"][reservation.pk]


class DomainCapacitySerializer(serializers.Serializer):
    level = serializers.CharField(help_text='A fabric level: "leaf", "spine_group", ..., "nvlink_domain" (a rack).')
    name = serializers.CharField()
    nodes = serializers.IntegerField()
    available = serializers.IntegerField(help_text="Nodes free now.")
    children = serializers.ListField(
        child=serializers.DictField(),
        help_text="The domains one level down, each of this shape; none under a rack, nor a domain at the answer's "
        "`depth`.",
    )


class PodCapacitySerializer(serializers.Serializer):
    name = serializers.CharField()
    nodes = serializers.IntegerField()
    available = serializers.IntegerField(help_text="Nodes free now.")
    free_open_ended = serializers.IntegerField(
        help_text="Nodes free now that no later booking holds within the maximum duration: "
        "what a reservation without ends_at can get."
    )
    whole_free_racks = serializers.IntegerField()
    domains = DomainCapacitySerializer(
        many=True, help_text="The pod's fabric domains, top down to its racks or to the answer's `depth`."
    )


class CapacitySerializer(serializers.Serializer):
    pods = PodCapacitySerializer(many=True)
    depth = serializers.IntegerField(
        help_text="The fabric levels of `domains` listed below each pod (the `depth` asked for, or the default); "
        "a domain at the cut lists no children."
    )


class NodeReportSerializer(StrictInputSerializer):
    description = serializers.CharField(max_length=2000, help_text="What is wrong, for the operators.")


class ReinstallSerializer(StrictInputSerializer):
    image = image_field("default the image the node runs now")


class WebhookRequestSerializer(StrictInputSerializer):
    url = serializers.URLField(max_length=500, help_text="http(s), to a public address.")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.choices), min_length=1, max_length=len(WebhookEvent)
    )


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = Webhook
        fields = ["id", "url", "events", "created_at"]
        read_only_fields = fields


class NewWebhookSerializer(WebhookSerializer):
    """The answer to a create: the only one that shows the secret."""

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookDeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "message_id",
            "event",
            "state",
            "attempts",
            "last_status",
            "last_error",
            "next_attempt_at",
            "created_at",
            "delivered_at",
            "payload",
        ]
        read_only_fields = fields


class ReservationChangeSerializer(StrictInputSerializer):
    ends_at = serializers.DateTimeField(
        required=False,
        help_text="A new end: later extends every node's hold (409, with the latest end possible, if "
        "another booking of one of them is in the way), earlier shortens it.",
    )
    node_count = StrictIntegerField(
        min_value=1,
        max_value=MAX_NODES_PER_RESERVATION,
        required=False,
        help_text="More nodes: placed in the reservation's pod, next to the ones it holds (whole racks, "
        "for rack_scale). Fewer: the nodes that leave whole racks free are given back, unless "
        "release_nodes names them.",
    )
    release_nodes = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        min_length=1,
        max_length=MAX_NODES_PER_RESERVATION,
        help_text="Names of held nodes to give back now; node_count, if given, must agree.",
    )

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError("give ends_at, node_count or release_nodes")
        return attrs


class OfferSerializer(serializers.Serializer):
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    pod = serializers.CharField()


class PlacementRefusalSerializer(serializers.Serializer):
    detail = serializers.CharField()
    offer = OfferSerializer(
        allow_null=True,
        help_text="The earliest period, as long as the one asked for and within the booking horizon, in which "
        'the request fits; null if none. POST again with these, or with "wait": true, to book it.',
    )


class QuotaLimitsSerializer(serializers.Serializer):
    nodes = serializers.IntegerField(allow_null=True, help_text="Nodes held at once; null: no limit.")
    nodes_per_pod = serializers.IntegerField(allow_null=True)
    node_hours_per_month = serializers.IntegerField(
        allow_null=True, help_text="Node-hours booked in a calendar month (UTC); null: no limit."
    )
    booking_horizon_days = serializers.FloatField()
    max_duration_days = serializers.FloatField()


class QuotaUseSerializer(serializers.Serializer):
    nodes = serializers.IntegerField(help_text="Nodes held now.")
    nodes_per_pod = serializers.DictField(child=serializers.IntegerField())
    node_hours_this_month = serializers.FloatField(help_text="Booked this calendar month: used, and still ahead.")


class QuotaSerializer(serializers.Serializer):
    limits = QuotaLimitsSerializer()
    used = QuotaUseSerializer()
