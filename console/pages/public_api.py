"""The public listener's node reads: the shared API views, with free text as the public may read it.

A node's quarantine reason can be an operator's own words (the admin's quarantine asks for them),
and those may name a tenant or a colleague: on the public listener it goes through the same
disclosure as the pages (console/pages/disclosure.py). The answer keeps the shape and the schema
name of the private listener's.
"""

from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import generics

from console.pages.disclosure import PublicDisclosure
from fleet.api.serializers import NodeSerializer
from fleet.api.views import NodeDetailView, NodeListView
from fleet.models import Node


@extend_schema_serializer(component_name="Node")
class DisclosedNodeSerializer(NodeSerializer):
    # The quarantine reason as the serializer context's `disclosure` lets it be read (no docstring:
    # the schema describes the Node with NodeSerializer's).
    def to_representation(self, instance):
        node = super().to_representation(instance)
        node["quarantine_reason"] = self.context["disclosure"].text(node["quarantine_reason"])
        node["hold_reason"] = self.context["disclosure"].text(node["hold_reason"])
        return node


class PublicNodeSerialization(generics.GenericAPIView[Node]):
    serializer_class = DisclosedNodeSerializer

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "disclosure": PublicDisclosure()}


class PublicNodeListView(PublicNodeSerialization, NodeListView):
    __doc__ = NodeListView.__doc__


class PublicNodeDetailView(PublicNodeSerialization, NodeDetailView):
    __doc__ = NodeDetailView.__doc__
