"""What the public listener's disclosure leaves of actors and free text, on the real PostgreSQL."""

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from console.pages.disclosure import EVERYTHING, PublicDisclosure, TenantDisclosure, role_of
from reservations import services as reservations
from reservations.models import Reservation, Tenant
from tests.support.factories import bring_up, enrol_default_fleet, make_available, tenant_token


@pytest.fixture
def names(db, django_user_model):
    tenant_token("zyxcorp")  # its login is the user tenant-zyxcorp
    django_user_model.objects.create_user("opalice", password="opalice-password-1", is_staff=True)
    django_user_model.objects.create_user("op.bob.", password="op-bob-password-1", is_staff=True)


def test_an_actor_is_shown_as_its_role():
    assert [
        role_of(actor)
        for actor in [
            "tenant:acme",
            "operator:alice",
            "worker:host-7:4242",
            "system:reconciler",
            "remediation:x",
            "test",
        ]
    ] == ["tenant", "operator", "system", "system", "system", "system"]


@pytest.mark.parametrize(
    ("text", "public"),
    [
        ("released by tenant zyxcorp", "released by tenant [tenant]"),
        ("ZyxCorp asked; opalice agreed", "[tenant] asked; [operator] agreed"),
        ("login tenant-zyxcorp, cluster zyxcorp-prod_2", "login [tenant], cluster [tenant]-prod_2"),
        ("by tenant:zyxcorp, then worker:wkhost7:4242 (system:reconciler)", "by [tenant], then [system] ([system])"),
        (
            "ask op.bob. about reservation 17 and Reservation #18",
            "ask [operator]. about [reservation] and [reservation]",
        ),
        ("zyxcorporation and xopalice are other words", "zyxcorporation and xopalice are other words"),
        ("XID 79 on GPU 3: GPU has fallen off the bus", "XID 79 on GPU 3: GPU has fallen off the bus"),
        ("", ""),
    ],
)
def test_public_free_text_names_no_tenant_user_actor_or_reservation(names, text, public):
    assert PublicDisclosure().text(text) == public
    assert EVERYTHING.text(text) == text


def test_a_tenant_reads_its_own_names_and_reservations_and_no_one_elses(names):
    zyxcorp, qwvinc = Tenant.objects.get(name="zyxcorp"), Tenant.objects.create(name="qwvinc")
    own, theirs = (Reservation.objects.create(tenant=tenant, node_count=1) for tenant in (zyxcorp, qwvinc))
    disclosure = TenantDisclosure(zyxcorp, username="tenant-zyxcorp")
    text = f"zyxcorp, tenant-zyxcorp and qwvinc asked opalice (tenant:zyxcorp, tenant:qwvinc): reservation {own.pk}"
    assert disclosure.text(f"{text}, reservation {theirs.pk}") == (
        f"zyxcorp, tenant-zyxcorp and [tenant] asked [operator] (tenant:zyxcorp, [tenant]): reservation {own.pk}, "
        "[reservation]"
    )
    assert [disclosure.actor(a) for a in ("tenant:zyxcorp", "tenant:qwvinc", "operator:opalice")] == [
        "tenant:zyxcorp",
        "tenant",
        "operator",
    ]
    assert [disclosure.tenant(n) for n in ("zyxcorp", "qwvinc", None)] == ["zyxcorp", "in use", None]
    assert [disclosure.in_use_by(n) for n in ("zyxcorp", "qwvinc")] == ["tenant zyxcorp", "in use"]


def test_the_names_are_read_once_per_disclosure_and_not_for_empty_text(names, django_assert_num_queries):
    disclosure = PublicDisclosure()
    with django_assert_num_queries(0):
        disclosure.text("")
    with django_assert_num_queries(2):
        disclosure.text("zyxcorp")
        disclosure.text("opalice")


def test_the_public_floor_runs_no_more_queries_than_the_private_one(admin_client, db):
    """The private floor is an operator's, signed in: two queries more (its session and user)."""
    client = admin_client
    make_available(enrol_default_fleet(50))
    bring_up(reservations.create_reservation(tenant=Tenant.objects.create(name="zyxcorp"), node_count=3, actor="test"))
    counts = {}
    for urlconf in ["gpufleet.urls", "gpufleet.urls_public"]:
        with override_settings(ROOT_URLCONF=urlconf):
            client.get("/")  # placement's topology is read once per process after enrolment
            with CaptureQueriesContext(connection) as queries:
                html = client.get("/").content.decode()
            counts[urlconf] = len(queries)
        assert ("tenant zyxcorp" in html) is (urlconf == "gpufleet.urls")
    assert counts["gpufleet.urls_public"] + 2 == counts["gpufleet.urls"]
