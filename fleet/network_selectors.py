"""Reads of tenants' networks: a reservation's networks as its tenant is told them (whether its
nodes were read back on each, and what holds one back) and its nodes' private addresses."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Count, OuterRef, Q, Subquery

from core.topology import ETHERNET, FABRICS, INFINIBAND, NVLINK
from fleet.models import NetworkAttachment, PrivateAddress, TenantNetwork
from fleet.networks import pkey_text

NO_NETWORKS: dict[str, dict | None] = dict.fromkeys(FABRICS)


def networks_by_reservation(reservation_ids: Iterable[int]) -> dict[int, dict[str, dict | None]]:
    """Each reservation's networks, by fabric (None: none on that fabric), in one query (none for no
    reservations). Each says whether it is `confirmed` (some node should be on it, and every one
    that should was read back on it) and its `problem`: the first (by node name) of its nodes'
    attachment problems, or None."""
    if not (ids := list(reservation_ids)):  # a new reservation's answer: no query to build
        return {}
    wanting = NetworkAttachment.objects.filter(wanted=OuterRef("pk")).exclude(problem="").order_by("node__name")
    rows = (
        TenantNetwork.objects.filter(reservation_id__in=ids)
        .annotate(
            members=Count("attachments"),
            unconfirmed=Count("attachments", filter=Q(attachments__confirmed=False)),
            first_problem=Subquery(wanting.values("problem")[:1]),
        )
        .order_by("reservation_id", "fabric", "scope")
    )
    found: dict[int, dict[str, list[TenantNetwork]]] = defaultdict(lambda: defaultdict(list))
    for network in rows:
        found[network.reservation_id][network.fabric].append(network)
    return {reservation: _answer(by_fabric) for reservation, by_fabric in found.items()}


def reservation_networks(reservation_id: int) -> dict[str, dict | None]:
    """The reservation's networks as GET /v1/reservations/{id} shows them."""
    return networks_by_reservation([reservation_id]).get(reservation_id, dict(NO_NETWORKS))


def private_addresses(reservation_id: int) -> dict[str, str]:
    """The private address of each node serving the reservation that has been given one, by name."""
    held = PrivateAddress.objects.filter(
        network__reservation_id=reservation_id, network__fabric=ETHERNET, node__reservation_id=reservation_id
    )
    return dict(held.order_by("node__name").values_list("node__name", "address"))


def private_address_of_node() -> Subquery:
    """For a query of nodes: each node's private address on its reservation's Ethernet network
    (None while it has none), as a column of the same query."""
    held = PrivateAddress.objects.filter(
        node=OuterRef("pk"), network__reservation_id=OuterRef("reservation_id"), network__fabric=ETHERNET
    )
    return Subquery(held.values("address")[:1])


def _answer(by_fabric: dict[str, list[TenantNetwork]]) -> dict[str, dict | None]:
    answer = dict(NO_NETWORKS)
    if ethernet := by_fabric.get(ETHERNET):
        network = ethernet[0]  # one per reservation
        answer[ETHERNET] = {
            "kind": network.kind,
            "segment": network.segment,
            "vlan": network.vlan,
            "subnet": network.subnet,
            "gateway": network.gateway,
            **_state(ethernet),
        }
    if infiniband := by_fabric.get(INFINIBAND):
        pkeys = [pkey_text(n.segment) for n in infiniband if n.segment is not None]
        answer[INFINIBAND] = {"pkey": pkeys[0], **({"pkeys": pkeys} if len(pkeys) > 1 else {}), **_state(infiniband)}
    if nvlink := by_fabric.get(NVLINK):
        answer[NVLINK] = {"partition": nvlink[0].partition, **_state(nvlink)}  # one name in every domain
    return answer


def _state(networks: list[TenantNetwork]) -> dict:
    """Whether nodes were read back on these networks (of one fabric), and the first problem."""
    members = sum(n.members for n in networks)  # type: ignore[attr-defined]  # annotated
    unconfirmed = sum(n.unconfirmed for n in networks)  # type: ignore[attr-defined]
    problems = [n.first_problem for n in networks if n.first_problem]  # type: ignore[attr-defined]
    return {"confirmed": members > 0 and not unconfirmed, "problem": problems[0] if problems else None}
