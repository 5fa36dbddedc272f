"""GET /healthz: is the control plane able to work? It needs its database and its broker; the
public listener, which holds no broker URL, its database alone."""

import redis
from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.redis_connection import redis_client

CHECK_TIMEOUT_SECONDS = 2


def database_status() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return f"down: {type(exc).__name__}"
    return "ok"


def broker_status() -> str:
    client = redis_client(
        settings.REDIS_URL, socket_timeout=CHECK_TIMEOUT_SECONDS, socket_connect_timeout=CHECK_TIMEOUT_SECONDS
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"down: {type(exc).__name__}"
    finally:
        client.close()
    return "ok"


HEALTH = inline_serializer(
    "Health",
    {
        "status": serializers.CharField(),
        "database": serializers.CharField(),
        "broker": serializers.CharField(required=False),
        "detail": serializers.CharField(required=False),
    },
)


class HealthzView(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]
    checks = ("database", "broker")  # the public listener's: ("database",)

    @extend_schema(responses={200: HEALTH, 503: HEALTH})
    def get(self, request):
        status_of = {"database": database_status, "broker": broker_status}
        checks = {name: status_of[name]() for name in self.checks}
        down = [name for name, status in checks.items() if status != "ok"]
        if down:
            return Response({"status": "down", **checks, "detail": f"{' and '.join(down)} down"}, status=503)
        return Response({"status": "ok", **checks})
