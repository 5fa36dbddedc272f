from django.db.models import Prefetch
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import generics, permissions
from rest_framework.views import APIView

from core.error_schema import ERROR
from fleet.api.filtersets import NodeFilterSet
from fleet.api.serializers import ImageSerializer, NodeSerializer
from fleet.models import GPU, ConfigDrive, Image, Node


def nodes():
    return Node.objects.select_related("rack__pod").prefetch_related(
        Prefetch("gpus", queryset=GPU.objects.order_by("index"))
    )


class NodeListView(generics.ListAPIView):
    """Every node with its state, place, current step and GPUs; filter with ?state=, ?pod=, ?rack=."""

    # Who may read, and how much of a quarantine reason, is each listener's to say: its URLconf
    # routes to a subclass in console/pages/ (public_api, private_api), never to this class.
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


class ImageListView(generics.ListAPIView):
    """The OS images a reservation may name (`image`); `default` is what one that names none boots."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]
    serializer_class = ImageSerializer
    pagination_class = None
    queryset = Image.objects.order_by("name")


class ConfigDriveView(APIView):
    """A serving node's NoCloud config drive, for its BMC's virtual media. The token in the URL is
    the only credential (a BMC sends none); the drive is gone (404) once the node stops serving."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]

    @extend_schema(responses={(200, "application/x-iso9660-image"): OpenApiTypes.BINARY, 404: ERROR})
    def get(self, request, token: str):
        drive = get_object_or_404(ConfigDrive, token=token)
        answer = HttpResponse(bytes(drive.iso), content_type="application/x-iso9660-image")
        answer["Content-Disposition"] = f'attachment; filename="{drive.node.name}-cidata.iso"'
        answer["Cache-Control"] = "no-store"
        return answer
