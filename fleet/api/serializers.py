from typing import cast

from rest_framework import serializers

from fleet.models import GPU, Image, Node
from fleet.services.network_attachments import hold_reasons


class GPUSerializer(serializers.ModelSerializer):
    class Meta:
        model = GPU
        fields = ["index", "uuid", "model", "health"]


class NodeListSerializer(serializers.ListSerializer):
    """A page of nodes: their holds read in one query for the page, not one a node."""

    def to_representation(self, data):
        nodes = list(data.all() if hasattr(data, "all") else data)
        cast(dict, self.context)["hold_reasons"] = hold_reasons(node.pk for node in nodes)
        return super().to_representation(nodes)


class NodeSerializer(serializers.ModelSerializer):
    """A node as anyone may see it: no tenant, no BMC access."""

    pod = serializers.CharField(source="rack.pod.name")
    rack = serializers.CharField(source="rack.name")
    gpus = GPUSerializer(many=True)
    hold_reason = serializers.SerializerMethodField(
        help_text="Why placement keeps off the node though its state would allow it, such as"
        " `network_cleanup_pending: <fabric>: <problem>` while its removal from a tenant's networks"
        " is not read back from the fabric; empty when nothing holds it."
    )

    class Meta:
        model = Node
        list_serializer_class = NodeListSerializer
        fields = [
            "name",
            "state",
            "state_since",
            "pod",
            "rack",
            "position",
            "quarantine_reason",
            "hold_reason",
            "step",
            "step_since",
            "gpus",
        ]

    def get_hold_reason(self, node: Node) -> str:
        reasons = self.context.get("hold_reasons")
        if reasons is None:
            reasons = hold_reasons([node.pk])
        return reasons.get(node.pk, "")


class ImageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Image
        fields = ["name", "os", "sha256", "default", "boot_mode", "needs_secure_boot"]
