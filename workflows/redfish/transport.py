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

Where the BMC advertises $expand (DSP0266) in its service root, a collection is read with its
members inline in one GET (`read_members`); where it does not, member by member.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeGuard
from urllib.parse import urljoin, urlsplit

import tenacity
from django.conf import settings

from core import outbound
from core.parsing import InvalidInput, parse_int
from fleet.bmc_access import BMCAddressRefused, bmc_host, check_bmc_url, refusal_outside_bmc_networks
from workflows.redfish.errors import BMCPermanentError, BMCTransientError, RedfishError

SERVICE_ROOT = "/redfish/v1/"


TASK_RUNNING = frozenset({"New", "Starting", "Running", "Pending", "Stopping", "Suspended", "Service"})
TASK_POLL_SECONDS = 1.0
TASK_POLLS = 60  # an HGX BMC signs a GPU's measurements in seconds: a task not done in a minute has failed


def task_outcome(task: dict) -> tuple[bool, str]:
    """(done, outcome) of a Task: outcome is its TaskState, then its messages if it failed. A body
    without TaskState is the finished operation's own result, which a task monitor may answer."""
    state = task.get("TaskState", "Completed")
    if state in TASK_RUNNING:
        return False, state
    messages = "; ".join(m.get("Message", "") for m in task.get("Messages", []) if isinstance(m, dict))
    return True, f"{state}{': ' + messages if messages and state != 'Completed' else ''}"


def payload_location(task: dict) -> str | None:
    """The Location among a finished Task's Payload.HttpHeaders: where NVIDIA's HGX BMCs put the
    result of an action they ran as a task."""
    payload = task.get("Payload")
    headers = payload.get("HttpHeaders") if isinstance(payload, dict) else None
    for header in headers if isinstance(headers, list) else []:
        name, _, value = str(header).partition(":")
        if name.strip().lower() == "location" and value.strip():
            return value.strip()
    return None


@dataclass(frozen=True)
class BMCAccess:
    node: str
    base_url: str
    system_id: str
    username: str
    password: str


def link(value: object) -> str | None:
    """The `@odata.id` of a link ({"@odata.id": ...}) or of a body expanded in its place; None if
    `value` is neither."""
    found = value.get("@odata.id") if isinstance(value, dict) else None
    return found if isinstance(found, str) and found else None


def action_target(action: object) -> str | None:
    """The `target` of a Redfish action ({"target": ...}), or None if `action` has none."""
    found = action.get("target") if isinstance(action, dict) else None
    return found if isinstance(found, str) and found else None


def is_inline(value: object) -> TypeGuard[dict]:
    """A resource's body in place of the link to it ($expand): more than annotations (@odata.id,
    @odata.type, ...), which is all a bare link carries."""
    return isinstance(value, dict) and any(not key.startswith("@") for key in value)


def _expand_levels_advertised(root: dict) -> int:
    """The `$expand=.` levels a service root's ProtocolFeaturesSupported.ExpandQuery allows; 0 without NoLinks."""
    features = root.get("ProtocolFeaturesSupported")
    query = features.get("ExpandQuery") if isinstance(features, dict) else None
    if not isinstance(query, dict) or query.get("NoLinks") is not True:
        return 0
    most = query.get("MaxLevels")
    return most if query.get("Levels") is True and type(most) is int and most > 1 else 1


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
        expand: bool = True,
    ):
        self.access = access
        # False: never ask for $expand, whatever the BMC advertises; for a BMC whose expanded
        # answers are wrong or slower than reading each member.
        self.expand = expand
        self._expand_levels: int | None = None
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

    # -- $expand --------------------------------------------------------------------------

    @functools.cached_property
    def service_root(self) -> dict:
        """The service root, read once per client: what a BMC links and supports there does not
        change under a workflow."""
        return self.get(SERVICE_ROOT)

    @property
    def expand_levels(self) -> int:
        """How deep this client asks `$expand=.` to go: the MaxLevels the service root advertises
        (1 without Levels), or 0, member by member, where it advertises no ExpandQuery with NoLinks
        or refuses its root, or where `expand` is off. Learnt at the first collection read and kept;
        a root not answered now is asked again at the next (the collection's own GET says what failed)."""
        if not self.expand:
            return 0
        if self._expand_levels is None:
            try:
                self._expand_levels = _expand_levels_advertised(self.service_root)
            except BMCTransientError:
                return 0
            except BMCPermanentError:
                self._expand_levels = 0
        return self._expand_levels

    def get_expanded(self, path: str, levels: int = 1) -> dict:
        """A resource with what it links outside Links inline, `levels` deep as far as the BMC
        expands (expand_levels), from one GET; a plain GET where it expands nothing. A link it
        left as it is (one the caller may not read, or that failed) stays a link: `resolve` it."""
        levels = min(levels, self.expand_levels)
        if levels < 1:
            return self.get(path)
        query = "." if levels == 1 else f".($levels={levels})"
        call = f"GET {path}"
        return self._object(self.request("GET", f"{path}?$expand={query}", call=call), call)

    def resolve(self, value: dict) -> dict:
        """The body a link ({"@odata.id": ...}) stands for: `value` itself where the BMC expanded it in
        place of the link, else a GET of it."""
        return value if is_inline(value) else self.get(value["@odata.id"])

    def read_members(self, collection: str, levels: int = 1) -> Iterator[tuple[str, dict]]:
        """(path, body) of each member of a collection, in its order: from one GET where the BMC
        expands (with what lies below each member inline `levels - 1` deeper, as far as it goes),
        each member by its own GET, as it is reached, where it does not or where it left a link."""
        members = self.get_expanded(collection, levels).get("Members")
        if not isinstance(members, list):
            raise BMCPermanentError(self.access.node, f"GET {collection}", "answer is not a collection")
        return ((path, self.resolve(member)) for member in members if (path := link(member)))

    def inline_members(self, collection: str) -> dict[str, dict]:
        """The members the BMC inlines in one expanded GET of a collection, by path: {}, and no call,
        where it expands nothing, or if that GET fails (the caller reads what it needs by itself)."""
        if self.expand_levels < 1:
            return {}
        try:
            members = self.get_expanded(collection).get("Members")
        except RedfishError:
            return {}
        found = members if isinstance(members, list) else []
        return {path.rstrip("/"): member for member in found if is_inline(member) and (path := link(member))}

    def task_monitor(self, response: outbound.Answer, call: str) -> str | None:
        """The task monitor of an action the BMC accepted (202), or None if it finished at once."""
        if response.status_code != 202:
            return None
        monitor = response.headers.get("Location")
        if not monitor:
            raise BMCPermanentError(self.access.node, call, "202 without a task monitor")
        return monitor

    def action_result(self, response: outbound.Answer, call: str) -> dict:
        """What an action answered: at once, or when the BMC accepted it (202), its task's result once
        done: the monitor's own answer (DMTF), or what the finished Task's payload locates (NVIDIA's
        HGX). BMCPermanentError if the task failed or outlasts TASK_POLLS polls."""
        monitor = self.task_monitor(response, call)
        if monitor is None:
            return self._object(response, call)
        polled, outcome = f"task {monitor} of {call}", "Running"
        body: dict = {}
        for _ in range(TASK_POLLS):
            answer = self.request("GET", monitor, call=polled)
            if answer.status_code != 202:
                body = self._object(answer, polled)
                done, outcome = task_outcome(body)
                if done:
                    break
            self.sleep(TASK_POLL_SECONDS)
        else:
            raise BMCPermanentError(self.access.node, polled, f"still {outcome} after {TASK_POLLS} polls")
        if "TaskState" not in body:
            return body
        if outcome != "Completed":
            raise BMCPermanentError(self.access.node, polled, outcome)
        location = payload_location(body)
        if location is None:
            raise BMCPermanentError(self.access.node, polled, "Completed without a result to read")
        return self.get(location)
