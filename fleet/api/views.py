from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import generics, permissions

from fleet.api.filtersets import NodeFilterSet
from fleet.api.serializers import NodeSerializer
from fleet.models import GPU, Node


def nodes():
    return Node.objects.select_related("rack__pod").prefetch_related(
        Prefetch("gpus", queryset=GPU.objects.order_by("index"))
    )


class NodeListView(generics.ListAPIView):
    """Every node with its state, place, current step and GPUs; filter with ?state=, ?pod=, ?rack=."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    serializer_class = NodeSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = NodeFilterSet

    def get_queryset(self):
        return nodes().order_by("name")


class NodeDetailView(generics.RetrieveAPIView):
    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    serializer_class = NodeSerializer

    def get_object(self):
        return get_object_or_404(nodes(), name=self.kwargs["name"])
