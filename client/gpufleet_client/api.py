"""The gpu-fleet tenants' API over HTTP: a small requests-based client.

Every failure comes out as one exception, ApiError, carrying the HTTP status (None when the
server could not be reached or did not answer JSON) and the server's `detail`. The organisation's
API key goes in every request that needs one as `Authorization: Bearer gf_...`.
"""

from __future__ import annotations

import uuid
from typing import Any

import requests

PAGE_LIMIT = 1000  # the server's largest page (core.api.Pagination.max_limit)
TIMEOUT_SECONDS = 30


class ApiError(Exception):
    """The server refused the request (status 4xx or 5xx), or could not be reached (status None)."""

    def __init__(self, status: int | None, detail: str, body: Any = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.body = body  # the decoded JSON answer, when there was one


class Client:
    def __init__(self, url: str, key: str | None = None, *, timeout: float = TIMEOUT_SECONDS):
        self.url = url.rstrip("/")
        self.key = key
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["Accept"] = "application/json"
        self.session.headers["User-Agent"] = "gpufleet-client"

    # -- the API, one method a route ------------------------------------------------------

    def capacity(self, *, depth: int | None = None) -> dict:
        """Free nodes per pod, its fabric domains listed `depth` levels down (None: the server's default)."""
        params = {} if depth is None else {"depth": depth}
        return self.request("GET", "/v1/capacity", auth=False, params=params)

    def reservations(self) -> dict:
        return self.every_page("/v1/reservations")

    def reservation(self, reservation_id: int) -> dict:
        return self.request("GET", f"/v1/reservations/{reservation_id}")

    def reserve(self, wanted: dict) -> dict:
        # A fresh key for every reserve: a retried request is answered once, never doubled.
        return self.request("POST", "/v1/reservations", json=wanted, headers={"Idempotency-Key": str(uuid.uuid4())})

    def change(self, reservation_id: int, changes: dict) -> dict:
        return self.request("PATCH", f"/v1/reservations/{reservation_id}", json=changes)

    def release(self, reservation_id: int) -> dict:
        return self.request("POST", f"/v1/reservations/{reservation_id}/release")

    def quota(self) -> dict:
        return self.request("GET", "/v1/quota")

    def usage(self, *, start: str | None = None, end: str | None = None) -> dict:
        params = {name: value for name, value in (("from", start), ("to", end)) if value is not None}
        return self.request("GET", "/v1/usage", params=params)

    def webhooks(self) -> dict:
        return self.every_page("/v1/webhooks")

    def add_webhook(self, url: str, events: list[str]) -> dict:
        return self.request("POST", "/v1/webhooks", json={"url": url, "events": events})

    def delete_webhook(self, webhook_id: int) -> None:
        self.request("DELETE", f"/v1/webhooks/{webhook_id}")

    def deliveries(self, webhook_id: int) -> dict:
        return self.every_page(f"/v1/webhooks/{webhook_id}/deliveries")

    def redeliver(self, webhook_id: int, delivery_id: int) -> dict:
        return self.request("POST", f"/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver")

    def keys(self) -> dict:
        return self.every_page("/v1/keys")

    def create_key(
        self, name: str, *, scope: str | None = None, expires_at: str | None = None, organisation_key: bool = False
    ) -> dict:
        """A new key: the answer's `key` is the one time the server shows it."""
        wanted: dict[str, Any] = {"name": name}
        if scope is not None:
            wanted["scope"] = scope
        if expires_at is not None:
            wanted["expires_at"] = expires_at
        if organisation_key:
            wanted["organisation_key"] = True
        return self.request("POST", "/v1/keys", json=wanted)

    def revoke_key(self, key_id: int) -> None:
        self.request("DELETE", f"/v1/keys/{key_id}")

    def members(self) -> dict:
        return self.every_page("/v1/members")

    def change_member(self, member_id: int, role: str) -> dict:
        return self.request("PATCH", f"/v1/members/{member_id}", json={"role": role})

    def remove_member(self, member_id: int) -> None:
        self.request("DELETE", f"/v1/members/{member_id}")

    def sign_out_member(self, member_id: int) -> None:
        self.request("DELETE", f"/v1/members/{member_id}/sessions")

    def invite(self, email: str, role: str | None = None) -> dict:
        """An invitation: {"url", "expires_at"}, the URL to give the person invited."""
        wanted = {"email": email} if role is None else {"email": email, "role": role}
        return self.request("POST", "/v1/invitations", json=wanted)

    def attestation(self, node: str) -> dict:
        """The node's latest signed result: {"token", "claims", "verified"}."""
        return self.request("GET", f"/v1/nodes/{node}/attestation", auth=False)

    def signing_keys(self) -> dict:
        """The JWKS of every key that signed or signs attestation results."""
        return self.request("GET", "/v1/attestation/keys", auth=False)

    # -- HTTP -------------------------------------------------------------------------------

    def every_page(self, path: str) -> dict:
        """A paginated list, every page of it: the server's first page, with the others' results added."""
        page = self.request("GET", path, params={"limit": PAGE_LIMIT})
        results = list(page.get("results", []))
        while page.get("next") and len(results) < page.get("count", 0):
            page = self.request("GET", path, params={"limit": PAGE_LIMIT, "offset": len(results)})
            if not page.get("results"):
                break
            results.extend(page["results"])
        return {**page, "next": None, "previous": None, "results": results} if results else page

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        headers: dict | None = None,
        auth: bool = True,
    ) -> Any:
        """The decoded JSON answer (None for 204), or ApiError."""
        headers = dict(headers or {})
        if auth and self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        url = self.url + path
        try:
            response = self.session.request(
                method, url, json=json, params=params, headers=headers, timeout=self.timeout
            )
        except requests.RequestException as error:
            raise ApiError(None, f"could not reach {self.url}: {_reason(error)}") from None
        if response.status_code == 204:
            return None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.ok:
            if body is None:
                raise ApiError(None, f"{method} {url} answered {response.status_code} without JSON: is it gpu-fleet?")
            return body
        raise ApiError(response.status_code, _detail(response, body), body)


def _detail(response: requests.Response, body: Any) -> str:
    """What the server said was wrong: its `detail`, else its field errors, else the HTTP reason."""
    if isinstance(body, dict):
        if "detail" in body:
            return str(body["detail"])
        fields = [
            f"{field}: {'; '.join(map(str, errors if isinstance(errors, list) else [errors]))}"
            for field, errors in body.items()
        ]
        if fields:
            return ", ".join(fields)
    return f"{response.status_code} {response.reason or 'error'}".strip()


def _reason(error: requests.RequestException) -> str:
    """The part a person can act on: connection refused, name unknown, no answer in time."""
    if isinstance(error, requests.Timeout):
        return "no answer in time"
    inner = error.args[0] if error.args else None
    text = str(getattr(inner, "reason", None) or inner or error)
    # urllib3 names the connection first: "HTTPConnection(host='...', port=...): Failed to ..."
    return text.split("): ", 1)[-1] if text.startswith(("HTTPConnection(", "HTTPSConnection(")) else text
