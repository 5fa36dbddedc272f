"""A tenant's server cannot hold the control plane's calls, nor turn them inward.

Every outbound call (webhooks, node agents, BMCs) ends at GPUFLEET_OUTBOUND_DEADLINE_SECONDS however
slowly the answer trickles in, reads at most GPUFLEET_OUTBOUND_MAX_BODY_BYTES, follows no
redirect, and connects to exactly the address it checked; a webhook never reaches a special-purpose
address, by name, by literal, or by a name that rebinds between the check and the connection.
"""

from __future__ import annotations

import ipaddress
import ssl
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core import metrics_ca, outbound
from reservations.models import Tenant, Webhook, WebhookDelivery
from tests.support.api import post, tenant_client
from tests.support.hostile_servers import Dripping, Listener, Rebinding, asking, dns_server, running
from tests.support.loopback import serving
from tests.support.ports import free_port
from tests.support.webhooks import Receiver
from workflows import webhooks as sender
from workflows.agent import AgentClient, AgentError, AgentUnavailable
from workflows.redfish import BMCAccess, BMCPermanentError, BMCTransientError, RedfishClient

DEADLINE = 1.0
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


@pytest.fixture
def short_deadline(settings):
    settings.OUTBOUND_DEADLINE_SECONDS = DEADLINE
    settings.WEBHOOK_ALLOWED_NETWORKS = LOOPBACK


@pytest.fixture
def acme(db):
    return tenant_client("acme")


def queue_delivery(url: str) -> WebhookDelivery:
    tenant, _ = Tenant.objects.get_or_create(name="mallory")
    webhook = Webhook.objects.create(tenant=tenant, url=url, events=["reservation.active"], secret="whsec_" + "A" * 44)
    return WebhookDelivery.objects.create(
        webhook=webhook, message_id=f"msg_{uuid.uuid4().hex}", event="reservation.active", payload={"type": "x"}
    )


class Stopwatch:
    """How long its block took, raise or not."""

    seconds = 0.0

    def __enter__(self) -> Stopwatch:
        self.began = time.monotonic()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.monotonic() - self.began


# -- a receiver that drips ----------------------------------------------------------------------


def test_the_deadline_is_for_the_whole_call_not_for_each_read():
    with running(Dripping(interval=0.25)) as server, Stopwatch() as took, pytest.raises(outbound.DeadlinePassed):
        outbound.request("GET", server.url, check=outbound.any_address, deadline=DEADLINE, max_body_bytes=1024)
    assert DEADLINE <= took.seconds < DEADLINE + 0.5


def test_a_webhook_receiver_that_drips_is_cut_off_at_the_deadline(db, short_deadline):
    with running(Dripping(interval=2)) as server:
        delivery = queue_delivery(f"{server.url}/hooks")
        with Stopwatch() as took:
            sender.deliver_due()
    delivery.refresh_from_db()
    assert took.seconds < DEADLINE + 0.5
    assert delivery.state == WebhookDelivery.State.PENDING and "deadline" in delivery.last_error


def test_an_agent_that_drips_is_cut_off_at_the_deadline(short_deadline):
    with running(Dripping(interval=2)) as server:
        agent = AgentClient("node-x", f"{server.url}/agent/node-x", "token")
        with Stopwatch() as took, pytest.raises(AgentUnavailable, match="Timeout"):
            agent.inventory()
    assert took.seconds < DEADLINE + 0.5


def test_a_bmc_that_drips_is_cut_off_at_the_deadline_on_every_attempt(short_deadline):
    with running(Dripping(interval=2)) as server:
        bmc = RedfishClient(BMCAccess("node-x", server.url, "1", "root", "pw"), attempts=2, backoff=0.01)
        with Stopwatch() as took, pytest.raises(BMCTransientError, match="Timeout"):
            bmc.power_state()
    assert bmc.calls == 2 and took.seconds < 2 * DEADLINE + 0.5


# -- the body cap and redirects -----------------------------------------------------------------


class Answering(BaseHTTPRequestHandler):
    status = 200
    headers_out: dict[str, str] = {}
    body = b""

    def _answer(self):
        self.send_response(self.status)
        for name, value in self.headers_out.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.end_headers()  # no Content-Length: the body runs to the end of the connection
        self.wfile.write(self.body)
        self.close_connection = True

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def answering(status=200, body=b"", headers=None) -> ThreadingHTTPServer:
    handler = type("Handler", (Answering,), {"status": status, "body": body, "headers_out": headers or {}})
    return ThreadingHTTPServer(("127.0.0.1", 0), handler)


def test_a_body_over_the_cap_is_refused_by_the_agent_and_bmc_clients(settings):
    settings.OUTBOUND_MAX_BODY_BYTES = 1024
    big = b'{"PowerState": "On", "padding": "' + b"x" * 4096 + b'"}'
    with serving(answering(body=big)) as url:
        with pytest.raises(AgentError, match="over the cap of 1024"):
            AgentClient("node-x", f"{url}/agent", "token").inventory()
        with pytest.raises(BMCPermanentError, match="over the cap of 1024"):
            RedfishClient(BMCAccess("node-x", url, "1", "root", "pw"), attempts=3).power_state()


def test_a_redirect_is_answered_not_followed(db, short_deadline):
    inside = Receiver()
    with serving(inside), serving(answering(307, headers={"Location": inside.url})) as url:
        answer = outbound.request("GET", url, check=outbound.any_address, deadline=DEADLINE, max_body_bytes=1024)
        delivery = queue_delivery(f"{url}/hooks")
        sender.deliver_due()
    delivery.refresh_from_db()
    assert answer.status_code == 307 and delivery.last_error == "answered 307"
    assert inside.received.empty()


# -- DNS rebinding -----------------------------------------------------------------------------


def test_a_name_that_rebinds_to_loopback_is_never_connected_to():
    """rebind.test answers 127.0.0.2 (standing for a public address: the allowed networks admit
    it) first and 127.0.0.1 after. The call resolves once and connects to what it checked."""
    port = free_port()
    admitted = outbound.public_only([ipaddress.ip_network("127.0.0.2/32")])
    rebinding = Rebinding(first="127.0.0.2", then="127.0.0.1")
    with (
        running(Listener("127.0.0.1", port)) as inside,
        running(Listener("127.0.0.2", port)) as outside,
        dns_server(rebinding) as dns_port,
    ):
        url = f"http://rebind.test:{port}/hooks"
        answer = outbound.request(
            "POST", url, check=admitted, deadline=5, max_body_bytes=1024, body=b"{}", resolver=asking(dns_port)
        )
        assert answer.status_code == 204 and rebinding.asked == 1
        with pytest.raises(outbound.OutboundRefused, match=r"rebind.test resolves to 127.0.0.1, .*loopback"):
            outbound.request("POST", url, check=admitted, deadline=5, max_body_bytes=1024, resolver=asking(dns_port))
    assert inside.connections == 0
    assert outside.connections == 1 and f"Host: rebind.test:{port}".encode() in outside.heads[0]


def test_over_https_the_pinned_address_is_checked_against_the_name_in_the_url(tmp_path):
    """The connection goes to the address checked, while TLS (SNI and the certificate's check)
    speaks for the name in the URL: a name the certificate holds passes, another name that
    resolves to the same address is refused in the handshake."""
    ca = metrics_ca.ensure(tmp_path / "ca", server_names=("agent.fleet.test",))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers204)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(ca.server_cert, ca.server_key)
    server.socket = served.wrap_socket(server.socket, server_side=True)
    trusting = ssl.create_default_context(cafile=ca.ca_cert)

    def to_loopback(host: str, port: int) -> list[outbound.IPAddress]:
        return [ipaddress.ip_address("127.0.0.1")]

    def call(name: str) -> outbound.Answer:
        return outbound.request(
            "GET",
            f"https://{name}:{server.server_address[1]}/",
            check=outbound.any_address,
            deadline=5,
            max_body_bytes=1024,
            resolver=to_loopback,
            ssl_context=trusting,
        )

    with serving(server):
        assert call("agent.fleet.test").status_code == 204
        with pytest.raises(outbound.OutboundUnreachable, match=r"certificate|hostname|match"):
            call("other.fleet.test")


class Answers204(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


# -- special-purpose addresses ------------------------------------------------------------------

SPECIAL = [
    ("127.0.0.1", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.5", "private (10.0.0.0/8)"),
    ("172.16.0.1", "private (172.16.0.0/12)"),
    ("192.168.1.1", "private (192.168.0.0/16)"),
    ("fd12::1", "unique local"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("64:ff9b::a00:1", "NAT64 (64:ff9b::/96); carrying 10.0.0.1, private"),
    ("64:ff9b:1::a00:1", "local NAT64"),
    ("2002:a00:1::1", "6to4 (2002::/16); carrying 10.0.0.1, private"),
    ("::ffff:10.0.0.1", "IPv4-mapped"),
    ("::a00:1", "IPv4-compatible"),
    ("2001::1", "Teredo"),
    ("169.254.169.254", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.1", "documentation"),
    ("203.0.113.1", "documentation"),
    ("2001:db8::1", "documentation"),
]


def url_of(address: str) -> str:
    return f"http://[{address}]/hooks" if ":" in address else f"http://{address}/hooks"


@pytest.mark.parametrize(("address", "named"), SPECIAL)
def test_every_special_purpose_range_is_refused_at_creation_naming_url(acme, address, named):
    answer = post(acme, "/v1/webhooks", {"url": url_of(address), "events": ["reservation.active"]})
    assert answer.status_code == 400, answer.content
    detail = answer.json()["detail"]
    assert detail.startswith("url") and "not a public address" in detail and named in detail, detail


@pytest.mark.parametrize(("address", "named"), SPECIAL)
def test_every_special_purpose_range_is_refused_at_send_time(db, address, named):
    delivery = queue_delivery(url_of(address))
    assert sender.deliver_due() == {"delivered": 0, "retried": 1, "failed": 0}
    delivery.refresh_from_db()
    assert named in delivery.last_error and delivery.last_status is None


def test_the_allowed_networks_admit_an_address_explicitly(acme, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = (ipaddress.ip_network("64:ff9b::/96"),)
    answer = post(acme, "/v1/webhooks", {"url": url_of("64:ff9b::a00:1"), "events": ["reservation.active"]})
    assert answer.status_code == 201, answer.content
