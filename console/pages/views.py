"""The fleet floor and its pages: thin views over console/pages/selectors/, and the tenant's
page, whose forms (console/pages/forms.py) call the reservations' services as the API does.

Public pages answer GET, HEAD and OPTIONS only: they are served on the read-only listener too.
"""

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import urlencode
from django.views import View

from console.pages import figures, forms, selectors, tiles
from console.pages.sessions import ORGANISATION, standing_in_session
from console.pages.viewers import DisclosedPage
from core.errors import Conflict, FieldRefused, Forbidden
from core.parsing import InvalidInput, parse_int
from fleet.api.filtersets import NodeFilterSet
from reservations import access, webhooks
from reservations import services as reservations
from reservations.models import Reservation, Tenant
from reservations.placement import PlacementRefused
from reservations.services import members


class ReadOnlyPage(DisclosedPage, View):
    """A page of the fleet, as console/pages/viewers.py lets its viewer see it: on the private
    listener an anonymous browser is sent to the login page; on the public one it names no one."""

    http_method_names = ["get", "head", "options"]


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
        context = {
            "remediations": selectors.remediations(disclosure=self.disclosure),
            "reliability": figures.reliability_text(selectors.remediation_reliability()),
            "chart": figures.daily_chart(selectors.remediations_per_day(), selectors.ACTED_ON),
            "shadow_tallies": selectors.shadow_tallies(),
            "shadow_decisions": selectors.shadow_decisions(disclosure=self.disclosure),
        }
        return render(request, "fleet/remediations.html", context)


# -- the tenant's pages: the private listener only, behind a login ------------------------

NOT_A_TENANT = "your account is not a tenant's: ask an operator to link it to a tenant"


class TenantPage(LoginRequiredMixin, View):
    """A page of the signed-in tenant's own. A signed-in user who is no tenant's reads the notice
    on the page and may post nothing (403); everything posted acts on the tenant's own objects
    only, and another tenant's is answered like one that does not exist (404)."""

    tenant: Tenant | None = None
    standing: selectors.Standing | None = None
    administers = False  # a POST here is the organisation's administration (an admin's), not a use of it

    def dispatch(self, request, *args, **kwargs):
        if request.user.is_authenticated:  # else LoginRequiredMixin sends the browser to the login
            self.standing = standing_in_session(request.user, request.session)
            self.tenant = self.standing.tenant if self.standing is not None else None
            if request.method not in ("GET", "HEAD", "OPTIONS"):
                self._check_role()
        return super().dispatch(request, *args, **kwargs)

    def _check_role(self) -> None:
        if self.standing is None:
            raise PermissionDenied(NOT_A_TENANT)
        action = access.Action.ADMINISTER if self.administers else access.Action.USE
        if not access.allows(self.standing.role, action):
            raise PermissionDenied(f"you are a {self.standing.role.value} of {self.standing.tenant.name}: ask an admin")

    @property
    def own_tenant(self) -> Tenant:
        """The tenant a POST acts for: dispatch refused it (403) to a user who is no tenant's."""
        if self.tenant is None:
            raise PermissionDenied(NOT_A_TENANT)
        return self.tenant

    @property
    def actor(self) -> str:
        return f"tenant:{self.own_tenant.name}"

    def page(
        self,
        *,
        status: int = 200,
        reserve_form: forms.ReserveForm | None = None,
        refusal: dict[str, object] | None = None,
        changing: tuple[int, str, forms.PageForm] | None = None,
    ):
        """The tenant's page, with the form that was posted bound (its errors beside its fields):
        `reserve_form`, or `changing`, (reservation id, form's name, form) of one row."""
        context: dict[str, Any] = {"tenant": self.tenant, "standing": self.standing, "reservations": []}
        if self.tenant is not None:
            context |= selectors.tenant_page(self.tenant, page=self.request.GET.get("page"))
            # The row forms post back with the page they are on, and come back to it.
            context["page_query"] = _page_query(context["reservations_page"].number)
            context["reserve_form"] = (
                reserve_form if reserve_form is not None else forms.ReserveForm(tenant=self.tenant)
            )
            context["refusal"] = refusal
            for entry in context["reservations"]:
                # A row's forms, and the one that was posted even if its reservation just ended.
                entry["changing"] = changing is not None and changing[0] == entry["reservation"].pk
                if entry["live"] or entry["changing"]:
                    entry["extend_form"] = _extend_form(entry["reservation"])
                    entry["node_count_form"] = _node_count_form(entry["reservation"])
                if changing is not None and entry["changing"]:
                    entry[changing[1]] = changing[2]
        return render(self.request, "fleet/my_reservations.html", context, status=status)


def _extend_form(reservation: Reservation, data=None) -> forms.ExtendForm:
    return forms.ExtendForm(data, current_end=reservation.ends_at, auto_id=f"r{reservation.pk}-extend-%s")


def _node_count_form(reservation: Reservation, data=None) -> forms.NodeCountForm:
    initial = {"node_count": reservation.node_count}
    return forms.NodeCountForm(data, initial=initial, auto_id=f"r{reservation.pk}-nodes-%s")


def _page_query(number: int | str | None) -> str:
    """The query that names a page of the tenant's reservations; none for the first."""
    return f"?{urlencode({'page': number})}" if number and str(number) != "1" else ""


def _row(reservation_id: int, page: str | None = None) -> str:
    return f"{reverse('my-reservations')}{_page_query(page)}#reservation-{reservation_id}"


def _when(moment) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC" if moment else "open-ended"


class MyReservationsView(TenantPage):
    """GET: the tenant's page. POST: the reserve form; a refusal shows its reason and, when the
    request fits later, the offer with a button that books exactly it."""

    http_method_names = ["get", "head", "options", "post"]

    def get(self, request):
        return self.page()

    def post(self, request):
        form = forms.ReserveForm(request.POST, tenant=self.own_tenant)
        if not form.is_valid():
            return self.page(status=400, reserve_form=form)
        try:
            reservation = reservations.create_reservation(tenant=self.own_tenant, actor=self.actor, **form.booking())
        except FieldRefused as refused:
            form.refuse(refused.field, refused.reason)
            return self.page(status=400, reserve_form=form)
        except PlacementRefused as refused:  # as the API's 409: the reason, and the offer if any
            offer = refused.offer
            refusal: dict[str, object] = {
                "reason": refused.reason,
                "offer": offer,
                "taking": form.taking(offer) if offer else [],
            }
            return self.page(status=409, reserve_form=form, refusal=refusal)
        except Forbidden as forbidden:
            form.add_error(None, str(forbidden))
            return self.page(status=403, reserve_form=form)
        pod = f" in {reservation.pod.name}" if reservation.pod is not None else ""
        messages.success(
            request,
            f"Reservation {reservation.pk}: {reservation.node_count} node(s){pod}, "
            f"{_when(reservation.starts_at)} to {_when(reservation.ends_at)}, {reservation.state}"
            + (f" ({reservation.reason})" if reservation.reason else "")
            + ".",
        )
        return redirect(_row(reservation.pk))


class ChangeReservationView(TenantPage):
    """POST a row's form: change_reservation with what it asks; a refusal is shown in that form,
    with the API's words (an extension into another booking names the latest end it can have)."""

    http_method_names = ["post"]
    form_name = ""  # the row's form this view reads, as the template names it

    def form(self, reservation: Reservation, data):
        raise NotImplementedError

    def post(self, request, pk: int):
        reservation = get_object_or_404(Reservation, pk=pk, tenant=self.own_tenant)
        form = self.form(reservation, request.POST)
        if not form.is_valid():
            return self.page(status=400, changing=(pk, self.form_name, form))
        try:
            changed = reservations.change_reservation(
                reservation_id=pk, tenant=self.own_tenant, actor=self.actor, **form.change()
            )
        except FieldRefused as refused:
            form.refuse(refused.field, refused.reason)
            status = 400
        except Conflict as refused:
            form.add_error(None, str(refused))
            status = 409
        except Forbidden as forbidden:
            form.add_error(None, str(forbidden))
            status = 403
        else:
            ends = _when(changed.ends_at)
            messages.success(
                request, f"Reservation {changed.pk}: {changed.node_count} node(s) until {ends}, {changed.state}."
            )
            return redirect(_row(pk, request.GET.get("page")))
        return self.page(status=status, changing=(pk, self.form_name, form))


class ExtendReservationView(ChangeReservationView):
    form_name = "extend_form"

    def form(self, reservation, data):
        return _extend_form(reservation, data)


class ChangeNodeCountView(ChangeReservationView):
    form_name = "node_count_form"

    def form(self, reservation, data):
        return _node_count_form(reservation, data)


class ReleaseReservationView(TenantPage):
    """POST, from the row's confirm step: end the reservation now; its nodes go to wiping."""

    http_method_names = ["post"]

    def post(self, request, pk: int):
        reservation = get_object_or_404(Reservation, pk=pk, tenant=self.own_tenant)
        released = reservations.release_reservation(
            reservation_id=reservation.pk, actor=self.actor, reason="released by tenant"
        )
        messages.success(request, f"Reservation {released.pk} is {released.state}.")
        return redirect(_row(pk, request.GET.get("page")))


class RedeliverWebhookView(TenantPage):
    """POST: send one of the tenant's webhook deliveries again now, as POST .../redeliver does."""

    http_method_names = ["post"]
    administers = True

    def post(self, request, webhook: int, delivery: int):
        again = webhooks.redeliver(tenant=self.own_tenant, webhook_id=webhook, delivery_id=delivery)
        messages.success(request, f"Delivery {again.pk} ({again.event}) is queued to be sent again.")
        return redirect(f"{reverse('my-reservations')}#webhook-{webhook}")


class ChooseOrganisationView(LoginRequiredMixin, View):
    """POST `organisation`: the organisation this browser's pages act for, among the user's own."""

    http_method_names = ["post"]

    def post(self, request):
        wanted = request.POST.get("organisation", "")
        standing = standing_in_session(request.user, request.session, wanted)
        if standing is None or standing.tenant.name != wanted:
            raise Http404("you are no member of such an organisation")
        request.session[ORGANISATION] = wanted
        return redirect("my-reservations")


class InvitationView(LoginRequiredMixin, View):
    """An invitation's link: GET shows which organisation and role it offers, POST joins it. A
    browser not signed in is sent to the login page and back here."""

    def get(self, request, token: str):
        invitation = members.pending_invitation(token)
        if invitation is None:
            return render(request, "fleet/invitation.html", {"invitation": None}, status=404)
        return render(request, "fleet/invitation.html", {"invitation": invitation})

    def post(self, request, token: str):
        try:
            membership = members.accept_invitation(token=token, user=request.user)
        except members.InvitationRefused as refused:
            return render(request, "fleet/invitation.html", {"invitation": None, "refused": str(refused)}, status=409)
        request.session[ORGANISATION] = membership.tenant.name
        messages.success(request, f"You joined {membership.tenant.name} as {membership.role}.")
        return redirect("my-reservations")
