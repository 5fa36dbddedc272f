"""HTTP to one BMC: its credentials, the allow-list, retries and timeouts.

Transient errors (connection errors, timeouts, 5xx, 503 with Retry-After) are retried, by
tenacity, with exponential backoff and full jitter or as long as the BMC's Retry-After asks;
permanent ones (4xx) fail at once. Every call goes through core/outbound.py: it ends at its
deadline however slowly the BMC answers, reads at most GPUFLEET_OUTBOUND_MAX_BODY_BYTES, and
connects to exactly the address the allow-list passed. No call is ever made inside a database
transaction: the workflows call this outside.

The BMC's credentials go to the BMC and nowhere else. Its URL must pass the BMC-network
allow-list (fleet/bmc_access.py), and a URL the BMC hands back (an `@odata.id`, a task
monitor's `Location`) is followed only on the base URL's own scheme, host and port; redirects
are not followed at all. Anything else is a permanent error naming the node.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import tenacity
from django.conf import settings

from core import outbound
from core.parsing import InvalidInput, parse_int
from fleet.bmc_access import BMCAddressRefused, bmc_host, check_bmc_url, refusal_outside_bmc_networks
from workflows.redfish.errors import BMCPermanentError, BMCTransientError


@dataclass(frozen=True)
class BMCAccess:
    node: str
    base_url: str
    system_id: str
    username: str
    password: str


def _origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) a URL reaches; BMCAddressRefused if it is not plain http(s) to a host."""
    return (urlsplit(url).scheme, *bmc_host(url))


def _retry_after_seconds(value: str | None, now: float) -> float | None:
    """What a Retry-After header asks for, in seconds from `now` (RFC 9110 section 10.2.3: a
    number of seconds, or an HTTP-date); None when there is none or it cannot be read."""
    if not value:
        return None
    try:
        return float(parse_int(value))
    except InvalidInput:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": the date is in UTC, its source's zone unknown
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def _redfish_message(response: outbound.Answer) -> str:
    try:
        error = response.json()["error"]
        extended = error.get("@Message.ExtendedInfo") or [{}]
        return f"{response.status_code} {error.get('message', '')} {extended[0].get('Message', '')}".strip()
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return f"{response.status_code} {response.text[:200]!r}"


class RedfishTransport:
    """Requests to one BMC (or to the fabric's switch manager), each retried as the module says."""

    def __init__(
        self,
        access: BMCAccess,
        *,
        timeout: float | None = None,
        max_body_bytes: int | None = None,
        attempts: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.access = access
        self.timeout = timeout or settings.OUTBOUND_DEADLINE_SECONDS  # each attempt's, from connection to last byte
        self.max_body_bytes = max_body_bytes or settings.OUTBOUND_MAX_BODY_BYTES
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        credentials = base64.b64encode(f"{access.username}:{access.password}".encode()).decode()
        self.headers = {"Accept": "application/json", "OData-Version": "4.0", "Authorization": f"Basic {credentials}"}
        self.calls = 0  # HTTP requests made, retries included
        self.seconds = 0.0  # time spent waiting on them
        # Checked once, here. A refusal is raised by the first call, inside a workflow step,
        # where it fails the workflow as a permanent error instead of crashing the worker.
        self._bmc_origin: tuple[str, str, int] | None = None
        self._refused: str | None = None
        try:
            check_bmc_url(access.base_url)
            self._bmc_origin = _origin(access.base_url)
        except BMCAddressRefused as refusal:
            # The URL without any user:password in it: the refusal is logged and audited.
            parts = urlsplit(access.base_url)
            shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
            self._refused = f"{shown}: {refusal}"

    def close(self) -> None:
        """Nothing to let go: each call has a connection of its own, closed when it ends."""

    def request(
        self,
        method: str,
        path: str,
        *,
        json: dict | None = None,
        headers: dict[str, str] | None = None,
        call: str | None = None,
    ) -> outbound.Answer:
        call = call or f"{method} {path}"
        if self._refused:
            raise BMCPermanentError(self.access.node, call, self._refused)
        url = urljoin(self.access.base_url.rstrip("/") + "/", path.lstrip("/"))
        self._check_on_this_bmc(url, call)
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(BMCTransientError),  # a permanent error is raised at once
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=self._wait,
            sleep=self.sleep,
            reraise=True,  # the last BMCTransientError itself, not tenacity's RetryError
        )
        return retrying(self._attempt, method, url, json, headers, call)

    def _attempt(
        self, method: str, url: str, json: dict | None, headers: dict[str, str] | None, call: str
    ) -> outbound.Answer:
        """One HTTP request; BMCTransientError if it is worth repeating, BMCPermanentError if not."""
        self.calls += 1
        began = time.perf_counter()
        try:
            response = outbound.request(
                method,
                url,
                check=refusal_outside_bmc_networks,
                deadline=self.timeout,
                max_body_bytes=self.max_body_bytes,
                headers={**self.headers, **(headers or {})},
                json_body=json,
            )
        except outbound.DeadlinePassed as error:
            raise BMCTransientError(self.access.node, call, f"Timeout: {error.reason}") from None
        except outbound.OutboundUnreachable as error:
            raise BMCTransientError(self.access.node, call, f"ConnectionError: {error.reason}") from None
        except outbound.OutboundError as error:  # refused, or an answer over the cap: no better on a retry
            raise BMCPermanentError(self.access.node, call, error.reason) from None
        finally:
            self.seconds += time.perf_counter() - began
        # 304 Not Modified is no redirect: the answer to a conditional GET (If-None-Match).
        if 300 <= response.status_code < 400 and response.status_code != 304:
            where = response.headers.get("Location", "nowhere")
            raise BMCPermanentError(
                self.access.node,
                call,
                f"{response.status_code} redirect to {where!r}: redirects are not followed",
            )
        if response.status_code < 400:
            return response
        if response.status_code < 500:
            raise BMCPermanentError(self.access.node, call, _redfish_message(response))
        raise BMCTransientError(
            self.access.node, call, _redfish_message(response), retry_after=response.headers.get("Retry-After")
        )

    def _check_on_this_bmc(self, url: str, call: str) -> None:
        try:
            on_this_bmc = _origin(url) == self._bmc_origin
        except BMCAddressRefused:
            on_this_bmc = False
        if not on_this_bmc:
            raise BMCPermanentError(
                self.access.node,
                call,
                f"refusing {url[:200]!r}: not on this BMC ({self.access.base_url}), the only place its credentials go",
            )

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        """The BMC's Retry-After when it sent one we can read (capped at max_backoff), else
        exponential backoff with full jitter: uniform(0, min(max_backoff, backoff * 2**(n-1)))."""
        # Tenacity waits only after an attempt, whose outcome it has recorded.
        assert retry_state.outcome is not None
        failure = retry_state.outcome.exception()
        asked = _retry_after_seconds(getattr(failure, "retry_after", None), time.time())
        if asked is not None:
            return min(asked, self.max_backoff)
        return tenacity.wait_random_exponential(multiplier=self.backoff, max=self.max_backoff)(retry_state)

    def get(self, path: str) -> dict:
        return self._object(self.request("GET", path), f"GET {path}")

    def _object(self, response: outbound.Answer, call: str) -> dict:
        try:
            body = response.json()
        except ValueError as error:
            raise BMCTransientError(self.access.node, call, "answer is not JSON") from error
        if not isinstance(body, dict):
            raise BMCTransientError(self.access.node, call, "answer is not a JSON object")
        return body
