"""The $expand query parameter (DSP0266, "Query parameters"): `*` expands every hyperlink, `.` those
outside any `Links` property, `~` those inside one; `($levels=N)` cascades N deep (1 to MAX_LEVELS).

A hyperlink is a reference object, `{"@odata.id": uri}` and nothing else; it is replaced by the
body a GET of `uri` by the same caller answers. A GET that would be refused (401, 403, 404, a BMC
fault) leaves the reference as it is, so an expansion never shows what the caller may not read.
Each URI is read at most once per request, whatever the level or the number of references to it,
and a reference back to a resource being expanded above it stays a reference (no loops).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .access import needs_credentials
from .errors import RedfishError, reply

MAX_LEVELS = 3
PARAMETER = "$expand"
_VALUE = re.compile(r"(?P<kind>[*.~])(?:\(\$levels=(?P<levels>[0-9]{1,9})\))?")
# Headers the expanded body no longer matches: the handler's ETag names the unexpanded body.
_STALE_HEADERS = ("Content-Type", "Content-Length", "ETag")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Expansion:
    kind: str  # "*", "." or "~"
    levels: int

    def wanted(self, in_links: bool) -> bool:
        return self.kind == "*" or (self.kind == "~") == in_links


def parse(request: web.Request) -> Expansion | None:
    values = request.query.getall(PARAMETER, [])
    if not values:
        return None
    raw = ",".join(values)
    match = _VALUE.fullmatch(raw) if len(values) == 1 else None
    if match is None:
        raise RedfishError(
            400,
            "QueryParameterValueFormatError",
            f"The value {raw!r} for the parameter {PARAMETER} is of a different format than the parameter can "
            "accept: *, . or ~, optionally followed by ($levels=N).",
            raw,
            PARAMETER,
        )
    levels = int(match["levels"] or 1)
    if not 1 <= levels <= MAX_LEVELS:
        raise RedfishError(
            400,
            "QueryParameterOutOfRange",
            f"The value {raw!r} for the query parameter {PARAMETER} is out of range: $levels from 1 to {MAX_LEVELS}.",
            raw,
            PARAMETER,
            f"1-{MAX_LEVELS}",
        )
    return Expansion(match["kind"], levels)


def expandable(handler: Handler) -> Handler:
    """A GET handler that also answers $expand: the value checked first, then the body expanded."""

    async def wrapper(request: web.Request) -> web.StreamResponse:
        expansion = parse(request)
        response = await handler(request)
        if expansion is None:
            return response
        body = _json_body(response)
        if body is None:
            return response
        expanded = await _Expander(request, expansion).expand(body, expansion.levels, {_key(body.get("@odata.id"))})
        if expanded is body:
            return response
        headers = {k: v for k, v in response.headers.items() if k not in _STALE_HEADERS}
        return reply(expanded, response.status, headers)

    return wrapper


def _json_body(response: web.StreamResponse) -> dict | None:
    """The body of a 200 JSON answer; None for anything else (errors, 202, 304, XML)."""
    if response.status != 200 or not isinstance(response, web.Response) or response.content_type != "application/json":
        return None
    if not isinstance(response.body, bytes):
        return None
    body = json.loads(response.body)
    return body if isinstance(body, dict) else None


def _key(uri: object) -> str:
    return uri.rstrip("/") if isinstance(uri, str) else ""


def _reference(value: object) -> str | None:
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("@odata.id"), str):
        return value["@odata.id"]
    return None


def _rewrite(value: Any, expansion: Expansion, replace: Callable[[str], Any], in_links: bool = False) -> Any:
    """`value` with each wanted reference replaced by replace(uri) (None: left as it is); `value`
    itself where nothing changed, so an unchanged body is never copied."""
    uri = _reference(value)
    if uri is not None:
        if not expansion.wanted(in_links):
            return value
        replacement = replace(uri)
        return value if replacement is None else replacement
    if isinstance(value, dict):
        items = {k: _rewrite(v, expansion, replace, in_links or k == "Links") for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if isinstance(value, list):
        elements = [_rewrite(v, expansion, replace, in_links) for v in value]
        return value if all(a is b for a, b in zip(elements, value, strict=True)) else elements
    return value


class _Expander:
    def __init__(self, request: web.Request, expansion: Expansion):
        self.request = request
        self.expansion = expansion
        self.reads: dict[str, asyncio.Task[dict | None]] = {}

    async def expand(self, body: dict, levels: int, ancestors: set[str]) -> dict:
        wanted: set[str] = set()
        _rewrite(body, self.expansion, lambda uri: wanted.add(uri))  # add() answers None: collects, replaces nothing
        wanted = {uri for uri in wanted if _key(uri) not in ancestors}
        if not wanted:
            return body
        read = await asyncio.gather(*(self._read(uri) for uri in wanted))
        found = {uri: member for uri, member in zip(wanted, read, strict=True) if member is not None}
        if levels > 1:
            deeper = await asyncio.gather(
                *(self.expand(member, levels - 1, ancestors | {_key(uri)}) for uri, member in found.items())
            )
            found = dict(zip(found, deeper, strict=True))
        return _rewrite(body, self.expansion, found.get)

    def _read(self, uri: str) -> asyncio.Task[dict | None]:
        key = _key(uri)
        if key not in self.reads:
            self.reads[key] = asyncio.ensure_future(self._get(uri))
        return self.reads[key]

    async def _get(self, uri: str) -> dict | None:
        """What a GET of `uri` by this request's caller answers, if it answers 200 with JSON."""
        if not uri.startswith("/redfish/") or ("?" in uri or "#" in uri):
            return None
        if "principal" not in self.request and needs_credentials("GET", uri):
            return None
        app = self.request.app
        sub = self.request.clone(method="GET", rel_url=uri, headers={})
        match = await app.router.resolve(sub)
        if match.http_exception is not None:
            return None
        match.add_app(app)
        match.freeze()
        sub._match_info = match  # what aiohttp's Application does before it calls a handler
        try:
            response = await match.handler(sub)
        except (RedfishError, web.HTTPException):
            return None
        return _json_body(response)
