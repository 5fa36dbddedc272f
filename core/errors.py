"""The base classes of the domain's errors, so that the API and the pages map them to answers
without importing the apps that raise them (core/api.py's exception handler). Pure: no Django."""


class DomainError(Exception):
    """A request the domain refuses, in words a caller can act on."""


class FieldRefused(DomainError):
    """One field of the request breaks a rule: `field` names it, `reason` says why (an HTTP API
    answers 400, naming the field as for any invalid input)."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class Forbidden(DomainError):
    """The caller may not do this, whatever it asks (an HTTP API answers 403)."""


class NotFound(DomainError):
    """What the request names does not exist, or is not the caller's to see: the two answer alike,
    so that a tenant learns nothing of another's (an HTTP API answers 404)."""


class Conflict(DomainError):
    """The request does not fit the current state of things (an HTTP API answers 409)."""


class TooMany(DomainError):
    """The caller has done this as often as it may for now (an HTTP API answers 429)."""
