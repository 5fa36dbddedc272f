"""The tenant's view of its node's hardware: the console log its BMC keeps, from the start of the
tenancy on (the wipe clears it where the BMC can, and a BMC that cannot still keeps what the last
tenant's OS printed)."""

from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.views import APIView

from core.error_schema import ERROR
from fleet import selectors as fleet_selectors
from reservations import services as reservation_services
from reservations.api.views import IsTenant, caller_of
from workflows.clients import bmc_client
from workflows.redfish import BMCPermanentError, BMCTransientError

CONSOLE_LINES = 200


class BMCUnavailable(exceptions.APIException):
    status_code = 503


class NodeConsoleView(APIView):
    """The last lines of the node's console log (boot messages, cloud-init, the kernel) since the
    tenancy began, as text."""

    permission_classes = [IsTenant]

    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR, 404: ERROR, 503: ERROR})
    def get(self, request, pk: int, name: str):
        node = reservation_services.serving_node(reservation_id=pk, tenant=caller_of(request).tenant, name=name)
        if node is None:
            raise Http404
        bmc = bmc_client(node)
        try:
            lines = bmc.console_log(CONSOLE_LINES, since=fleet_selectors.tenancy_began(node_id=node.pk))
        except (BMCTransientError, BMCPermanentError) as error:
            raise BMCUnavailable(f"{node.name}'s BMC did not answer: {error}") from error
        finally:
            bmc.close()
        if lines is None:
            raise exceptions.NotFound(f"{node.name}'s BMC keeps no console log")
        return HttpResponse("".join(f"{line}\n" for line in lines), content_type="text/plain; charset=utf-8")
