"""The fleet floor and its pages: thin views over console/pages/selectors.py.

Public pages answer GET, HEAD and OPTIONS only: they are served on the read-only listener too.
"""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views import View

from console.pages import selectors, tiles
from console.pages.disclosure import EVERYTHING, PublicDisclosure
from core.parsing import InvalidInput, parse_int
from fleet.api.filtersets import NodeFilterSet


class ReadOnlyPage(View):
    http_method_names = ["get", "head", "options"]
    # True where the public listener's URLconf routes to the page: it then names no one.
    public_listener = False

    def setup(self, request, *args, **kwargs):
        super().setup(request, *args, **kwargs)
        self.disclosure = PublicDisclosure() if self.public_listener else EVERYTHING


def _page_or_fragment(request, page: str, fragment: str, context: dict):
    """The whole page, or only its live part when htmx asks for it (polling, stepping)."""
    response = render(request, fragment if request.htmx else page, context)
    # A cache must not hand the fragment to a browser asking for the page, nor the reverse.
    patch_vary_headers(response, ["HX-Request"])
    return response


class FloorView(ReadOnlyPage):
    def get(self, request):
        # The API's filters on GET /v1/nodes, read the same way: an unknown state is a 400 here too.
        filters = NodeFilterSet(request.GET)
        if not filters.is_valid():
            field, messages = next(iter(filters.errors.items()))
            return JsonResponse({"detail": f"{field}: {messages[0]}"}, status=400)
        floor = selectors.fleet_floor(filters.qs, disclosure=self.disclosure)
        context = {"floor": tiles.render_racks(floor)}
        return _page_or_fragment(request, "fleet/floor.html", "fleet/_floor.html", context)


class NodeView(ReadOnlyPage):
    def get(self, request, name: str):
        page = selectors.node_page(name, disclosure=self.disclosure)
        if page is None:
            raise Http404(f"no node {name}")
        return render(request, "fleet/node.html", {"page": page, "host": request.get_host()})


class IncidentsView(ReadOnlyPage):
    def get(self, request):
        return render(request, "fleet/incidents.html", {"incidents": selectors.incidents(disclosure=self.disclosure)})


class IncidentReplayView(ReadOnlyPage):
    def get(self, request, key: str):
        try:
            step = parse_int(request.GET.get("step", "0"))
        except InvalidInput as error:
            return JsonResponse({"detail": f"step: {error}"}, status=400)
        replay = selectors.replay(key, step, disclosure=self.disclosure)
        if replay is None:
            raise Http404(f"no incident {key} to replay")
        tiles.render_racks(replay.floor, changed=replay.changed)
        return _page_or_fragment(request, "fleet/replay.html", "fleet/_replay.html", {"replay": replay})


class RemediationsView(ReadOnlyPage):
    def get(self, request):
        return render(
            request, "fleet/remediations.html", {"remediations": selectors.remediations(disclosure=self.disclosure)}
        )


class MyReservationsView(LoginRequiredMixin, View):
    http_method_names = ["get", "head", "options"]

    def get(self, request):
        tenant = selectors.tenant_of(request.user)
        reservations = selectors.tenant_reservations(tenant) if tenant else []
        return render(request, "fleet/my_reservations.html", {"tenant": tenant, "reservations": reservations})
