"""The shape of every error answer, for the OpenAPI documents.

Kept out of core.api: that module is named in the REST_FRAMEWORK settings, and drf-spectacular
reads those settings when it is imported."""

from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

ERROR = inline_serializer("Error", {"detail": serializers.CharField()})
