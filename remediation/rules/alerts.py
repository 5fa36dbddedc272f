"""Alertmanager's webhook payload (v4), each alert checked field by field: an alert refused alone
never refuses its batch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType

from core import validation
from core.parsing import InvalidInput, check_text


@dataclass(frozen=True)
class Alert:
    name: str
    status: str  # "firing" or "resolved"
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    fingerprint: str
    starts_at: str  # RFC 3339, exactly as Alertmanager sent it: with the fingerprint, the idempotency key


MAX_ALERTS = 1000


MAX_PAIRS = 64  # labels or annotations per alert


MAX_LABEL_VALUE = 1024


MAX_ANNOTATION_VALUE = 4096


MAX_TEXT = 4096  # receiver, groupKey, externalURL, generatorURL


MAX_ALERT_NAME = 128  # what the record of an alert keeps (remediation.models.Remediation.alert)


LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}")


FINGERPRINT = re.compile(r"[0-9a-f]{16}")  # Alertmanager's model.Fingerprint, printed as %016x


RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})")


STATUSES = ("firing", "resolved")


class PayloadError(ValueError):
    """The webhook payload has no list of alerts to read; the message names the field."""


@dataclass(frozen=True)
class RefusedAlert:
    """One alert of a payload that cannot be acted on, and why; the payload's other alerts can."""

    index: int  # its place in the payload's `alerts`
    fingerprint: str | None  # Alertmanager's, when the alert carries a well-formed one
    reason: str  # e.g. "alerts[1].labels.node: must not contain the NUL character (U+0000)"


def parse_webhook(payload: object) -> list[Alert | RefusedAlert]:
    """The alerts of an Alertmanager webhook payload (version "4"), read by `parse_alerts`.

    The envelope around them (version, status, receiver, group and common labels...) is checked
    where the payload arrives, by remediation.api.views.AlertmanagerPayloadSerializer; this reads
    only `alerts`, and raises PayloadError if there is no list of them.
    """
    try:
        alerts = validation.sequence(
            validation.mapping(payload, "payload").get("alerts"), "alerts", max_items=MAX_ALERTS
        )
    except validation.Invalid as error:
        raise PayloadError(str(error)) from None
    return parse_alerts(alerts)


def parse_alerts(alerts: Sequence[object]) -> list[Alert | RefusedAlert]:
    """One entry per alert, in order: the parsed Alert or, for an alert that is malformed, a
    RefusedAlert saying why.

    Fields Alertmanager documents are checked for presence, type and size; fields it may add
    within version 4 are ignored (it added `truncatedAlerts` without a new version). Text that no
    record can store (a NUL character, a lone surrogate: core.parsing.check_text) refuses the
    alert that carries it.
    """
    return [_alert_or_refusal(item, index) for index, item in enumerate(alerts)]


def label_set(value: object, path: str) -> dict[str, str]:
    """Prometheus labels: names of its alphabet, values of at most MAX_LABEL_VALUE characters."""
    return _pairs(value, path, MAX_LABEL_VALUE, LABEL_NAME.fullmatch)


def annotation_set(value: object, path: str) -> dict[str, str]:
    # Annotation names are free-form in Alertmanager.
    return _pairs(value, path, MAX_ANNOTATION_VALUE, lambda name: 0 < len(name) <= 128)


def _alert_or_refusal(item: object, index: int) -> Alert | RefusedAlert:
    where = f"alerts[{index}]"
    try:
        check_text(item, where)
        return _alert(item, where)
    except InvalidInput as error:
        fingerprint = item.get("fingerprint") if isinstance(item, dict) else None
        well_formed = isinstance(fingerprint, str) and FINGERPRINT.fullmatch(fingerprint)
        return RefusedAlert(index=index, fingerprint=fingerprint if well_formed else None, reason=str(error))


def _alert(item: object, where: str) -> Alert:
    item = validation.mapping(item, where)
    status = validation.one_of(item.get("status"), f"{where}.status", STATUSES)
    labels = label_set(item.get("labels"), f"{where}.labels")
    if not labels.get("alertname"):
        raise validation.Invalid(f"{where}.labels.alertname", "required")
    name = validation.text(labels["alertname"], f"{where}.labels.alertname", min_length=0, max_length=MAX_ALERT_NAME)
    annotations = annotation_set(item.get("annotations", {}), f"{where}.annotations")
    starts_at = timestamp(item.get("startsAt"), f"{where}.startsAt")
    timestamp(item.get("endsAt"), f"{where}.endsAt")
    if "generatorURL" in item:
        validation.text(item["generatorURL"], f"{where}.generatorURL", min_length=0, max_length=MAX_TEXT)
    fingerprint = validation.matches(
        item.get("fingerprint"), f"{where}.fingerprint", FINGERPRINT, "16 lowercase hexadecimal digits"
    )
    return Alert(
        name=name,
        status=status,
        labels=MappingProxyType(labels),
        annotations=MappingProxyType(annotations),
        fingerprint=fingerprint,
        starts_at=starts_at,
    )


def _pairs(value: object, path: str, max_value: int, valid_name: Callable[[str], object]) -> dict[str, str]:
    pairs = validation.mapping(value, path, max_items=MAX_PAIRS, expected="an object of strings")
    for name, item in pairs.items():
        if not isinstance(name, str) or not valid_name(name):
            raise validation.Invalid(path, f"invalid name {str(name)[:64]!r}", name)
        validation.text(item, validation.at(path, name), min_length=0, max_length=max_value)
    return dict(pairs)


def timestamp(value: object, path: str) -> str:
    if isinstance(value, str) and RFC3339.fullmatch(value):
        try:
            datetime.fromisoformat(value)  # checks the calendar: no 31 February
        except ValueError:
            pass
        else:
            return value
    raise validation.Invalid(path, "must be an RFC 3339 timestamp", value)
