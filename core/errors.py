"""The base classes of the domain's errors, so that the API maps them to answers without
importing the apps that raise them. Pure: no Django."""


class DomainError(Exception):
    """A request the domain refuses, in words a caller can act on."""


class Conflict(DomainError):
    """The request does not fit the current state of things (an HTTP API answers 409)."""


class TooMany(DomainError):
    """The caller has done this as often as it may for now (an HTTP API answers 429)."""
