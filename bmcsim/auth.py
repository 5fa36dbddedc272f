"""Who is calling the Redfish service: HTTP basic auth or an X-Auth-Token session.

A principal is either OPERATOR (the fleet-wide credential, which sees everything) or a node
name: each node's BMC credential (`admin` and its own password) reaches the service-level
resources and that node's own resources only.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from dataclasses import dataclass

from core.topology import BMC_USERNAME

from .state import Fleet

OPERATOR = "*"
SESSION_TIMEOUT_S = 1800
MAX_SESSIONS = 20_000
_BASIC_CACHE_MAX = 50_000


@dataclass(slots=True)
class Session:
    id: str
    token: str
    principal: str
    username: str
    last_used: float


class Auth:
    def __init__(self, fleet: Fleet, username: str, password: str):
        self._fleet = fleet
        self._username = username
        self._password = password
        self._basic: dict[str, str | None] = {}
        self.sessions: dict[str, Session] = {}
        self._by_token: dict[str, Session] = {}

    def principal(self, username: str, password: str) -> str | None:
        if secrets.compare_digest(username, self._username) and secrets.compare_digest(password, self._password):
            return OPERATOR
        node = self._fleet.by_password.get(password)
        if node is not None and secrets.compare_digest(username, BMC_USERNAME):
            return node
        return None

    def from_headers(self, authorization: str | None, token: str | None) -> str | None:
        if token:
            session = self._by_token.get(token)
            now = time.monotonic()
            if session is None or now - session.last_used > SESSION_TIMEOUT_S:
                return None
            session.last_used = now
            return session.principal
        if authorization and authorization.startswith("Basic "):
            # Clients send the same header on every request: decode and check it once.
            if authorization not in self._basic:
                if len(self._basic) >= _BASIC_CACHE_MAX:
                    self._basic.clear()
                self._basic[authorization] = self._check_basic(authorization[6:])
            return self._basic[authorization]
        return None

    def _check_basic(self, encoded: str) -> str | None:
        try:
            username, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return self.principal(username, password)

    def login(self, username: str, password: str) -> Session | None:
        principal = self.principal(username, password)
        if principal is None:
            return None
        if len(self.sessions) >= MAX_SESSIONS:
            self.logout(next(iter(self.sessions)))
        session = Session(secrets.token_hex(8), secrets.token_urlsafe(24), principal, username, time.monotonic())
        self.sessions[session.id] = session
        self._by_token[session.token] = session
        return session

    def logout(self, session_id: str) -> None:
        session = self.sessions.pop(session_id)
        del self._by_token[session.token]
