"""What a viewer may see of who did what: the one place that decides it for the pages and the
node reads (console/pages/viewers.py picks the Disclosure for a request).

An operator on the private listener sees every name. The public listener's viewers are anyone:
they see no tenant, operator, worker or reservation by name. An actor is shown as its role
(`tenant`, `operator`, or `system` for workers, reconcilers and automatic remediation), a node's
tenant as "in use", and free text (reasons, details) with every actor string, tenant name,
username and reservation number in it replaced by a role in brackets; a tenant's report of a
broken node is withheld whole: its words are the tenant's. A tenant signed in on the private
listener sees the same, with its own names, actions, reservations and reports left in.
"""

from __future__ import annotations

import re
from functools import cached_property

from django.contrib.auth import get_user_model

from fleet import lifecycle
from fleet.models import AuditEvent, AuditOnlyEvent
from reservations.models import Reservation, Tenant

TENANT, OPERATOR, SYSTEM = "tenant", "operator", "system"
IN_USE = "in use"
# A quarantine the tenant asked for reads "tenant_report: <their words>" (fleet.services).
TENANT_REPORT = f"{lifecycle.Event.TENANT_REPORT.value}: "
REPORT_WITHHELD = f"{TENANT_REPORT}reported broken by its tenant (the report is for operators)"
# An actor is "<kind>:<who>"; every kind not named here is the system's own.
ROLE_OF_KIND = {"tenant": TENANT, "operator": OPERATOR}
ACTOR_IN_TEXT = re.compile(r"(?<![\w-])(tenant|operator|worker|system|remediation):[^\s,;()\[\]]+")
RESERVATION_IN_TEXT = re.compile(r"\breservations?\s*#?\s*\d+", re.IGNORECASE)
# Names are looked up as runs of letters and digits joined by the separators tenant names and
# usernames may hold: a set lookup per run, where one regex of every name would cost a page
# tens of milliseconds with a thousand tenants.
SEPARATORS = "-_.@+"
WORD_CHAIN = re.compile(rf"[^\W_]+(?:[{re.escape(SEPARATORS)}]+[^\W_]+)*")
SEPARATOR_RUN = re.compile(rf"([{re.escape(SEPARATORS)}]+)")


def role_of(actor: str) -> str:
    return ROLE_OF_KIND.get(actor.partition(":")[0], SYSTEM)


class Disclosure:
    """Everything, as the private listener shows it."""

    def actor(self, actor: str) -> str:
        return actor

    def tenant(self, name: str | None) -> str | None:
        """A node's tenant, or None when it has none."""
        return name

    def in_use_by(self, name: str | None) -> str | None:
        """What a floor tile says of its node's tenant, or None when it has none."""
        return f"tenant {name}" if name else None

    def text(self, text: str) -> str:
        return text

    def audit_reason(self, event: AuditEvent) -> str:
        return event.reason


class PublicDisclosure(Disclosure):
    """The public listener's: no one by name. Build one per request: it reads the names once."""

    def actor(self, actor: str, *, bracketed: bool = False) -> str:
        """The actor's role (in brackets within free text)."""
        return f"[{role_of(actor)}]" if bracketed else role_of(actor)

    def tenant(self, name: str | None) -> str | None:
        return IN_USE if name else None

    def in_use_by(self, name: str | None) -> str | None:
        return self.tenant(name)

    def text(self, text: str) -> str:
        if not text:
            return text
        if text.startswith(TENANT_REPORT):  # the tenant's own words are for operators only
            return REPORT_WITHHELD
        text = ACTOR_IN_TEXT.sub(lambda found: self.actor(found.group(0), bracketed=True), text)
        text = RESERVATION_IN_TEXT.sub(self._reservation_in_text, text)
        if self._role_of_name:
            text = WORD_CHAIN.sub(lambda found: self._without_names(found.group(0)), text)
        return text

    def _reservation_in_text(self, found: re.Match[str]) -> str:
        return "[reservation]"

    def _without_names(self, chain: str) -> str:
        """The chain ("acme-prod", "tenant-acme", "bob.smith") with each name in it, longest
        first, replaced by its role; a name counts only where it starts and ends on a whole word."""
        parts = SEPARATOR_RUN.split(chain)  # words at even places, separators at odd ones
        words = len(parts) // 2 + 1
        out, start = [], 0
        while start < words:
            for end in range(min(words, start + self._longest_name), start, -1):
                role = self._role_of_name.get("".join(parts[2 * start : 2 * end - 1]).lower())
                if role:
                    out.append(f"[{role}]")
                    break
            else:
                end = start + 1
                out.append(parts[2 * start])
            if end < words:
                out.append(parts[2 * end - 1])
            start = end
        return "".join(out)

    def audit_reason(self, event: AuditEvent) -> str:
        if event.event == lifecycle.Event.TENANT_REPORT:
            return REPORT_WITHHELD
        if event.event == AuditOnlyEvent.RESULT_DISCARDED:
            # Its reason names the workers by host; its detail tells the same story without them.
            detail = event.detail
            return (
                f"{detail.get('attempted', 'a result')} discarded: fencing token {detail.get('token', '?')} "
                f"no longer held (the node's is {detail.get('current_token', '?')})"
            )
        return self.text(event.reason)

    @cached_property
    def _role_of_name(self) -> dict[str, str]:
        """Every tenant's name and every username, lower-cased, with the role it stands for."""
        names = [(name, TENANT) for name in Tenant.objects.values_list("name", flat=True)]
        for username, tenant_id in get_user_model().objects.values_list("username", "tenant"):
            names.append((username, TENANT if tenant_id else OPERATOR))
        # Trimmed as the text's runs are: "bob." is found in "ask bob." as "bob".
        roles = {name.strip(SEPARATORS).lower(): role for name, role in names}
        for shown in ("", *self._own_names()):
            roles.pop(shown.strip(SEPARATORS).lower(), None)
        return roles

    def _own_names(self) -> tuple[str, ...]:
        """The names this viewer may read in free text: its own."""
        return ()

    @cached_property
    def _longest_name(self) -> int:
        """The most words any name has."""
        return max(len(SEPARATOR_RUN.split(name)) // 2 + 1 for name in self._role_of_name)


class TenantDisclosure(PublicDisclosure):
    """A signed-in tenant's: the public view, with its own name, login, actions and reservations'
    numbers left in, and its own reports of a broken node in its words. Another tenant's, an
    operator's or a worker's stay hidden as on the public listener."""

    def __init__(self, tenant: Tenant, *, username: str):
        self.own_tenant = tenant
        self.own_actor = f"tenant:{tenant.name}"
        self.username = username

    def actor(self, actor: str, *, bracketed: bool = False) -> str:
        return actor if actor == self.own_actor else super().actor(actor, bracketed=bracketed)

    def tenant(self, name: str | None) -> str | None:
        return name if name == self.own_tenant.name else super().tenant(name)

    def in_use_by(self, name: str | None) -> str | None:
        return f"tenant {name}" if name == self.own_tenant.name else super().in_use_by(name)

    def audit_reason(self, event: AuditEvent) -> str:
        if event.event == lifecycle.Event.TENANT_REPORT and event.actor == self.own_actor:
            return event.reason
        return super().audit_reason(event)

    def _reservation_in_text(self, found: re.Match[str]) -> str:
        number = int(re.sub(r"\D", "", found.group(0)))
        return found.group(0) if number in self._own_reservations else super()._reservation_in_text(found)

    @cached_property
    def _own_reservations(self) -> frozenset[int]:
        return frozenset(Reservation.objects.filter(tenant=self.own_tenant).values_list("pk", flat=True))

    def _own_names(self) -> tuple[str, ...]:
        return (self.own_tenant.name, self.username)


EVERYTHING = Disclosure()
