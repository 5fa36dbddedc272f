from rest_framework import serializers

from fleet.models import GPU, Image, Node


class GPUSerializer(serializers.ModelSerializer):
    class Meta:
        model = GPU
        fields = ["index", "uuid", "model", "health"]


class NodeSerializer(serializers.ModelSerializer):
    """A node as anyone may see it: no tenant, no BMC access."""

    pod = serializers.CharField(source="rack.pod.name")
    rack = serializers.CharField(source="rack.name")
    gpus = GPUSerializer(many=True)

    class Meta:
        model = Node
        fields = [
            "name",
            "state",
            "state_since",
            "pod",
            "rack",
            "position",
            "quarantine_reason",
            "step",
            "step_since",
            "gpus",
        ]


class ImageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Image
        fields = ["name", "os", "sha256", "default", "boot_mode", "needs_secure_boot"]
