"""Redfish responses and errors: Base registry messages in the {"error": ...} body, JSON bodies in, PATCH checks."""

from __future__ import annotations

import json

from aiohttp import web

REGISTRY = "Base.1.18"

ODATA_HEADERS = {"OData-Version": "4.0"}


class RedfishError(Exception):
    """A Redfish error: one status, one or more Base registry messages (MessageId, Message, MessageArgs)."""

    def __init__(self, status: int, message_id: str, message: str, *args: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.messages = [(message_id, message, args)]
        self.headers = headers or {}


def error_response(err: RedfishError) -> web.Response:
    severity = "Critical" if err.status >= 500 or err.status in (401, 403) else "Warning"
    resolution = "Correct the request and resubmit it." if err.status < 500 else "Retry the operation."
    body = {
        "error": {
            "code": f"{REGISTRY}.GeneralError",
            "message": "A general error has occurred. See ExtendedInfo for more information.",
            "@Message.ExtendedInfo": [
                {
                    "@odata.type": "#Message.v1_2_0.Message",
                    "MessageId": f"{REGISTRY}.{message_id}",
                    "Message": message,
                    "MessageArgs": list(args),
                    "Severity": severity,
                    "MessageSeverity": severity,
                    "Resolution": resolution,
                }
                for message_id, message, args in err.messages
            ],
        }
    }
    return web.json_response(body, status=err.status, headers={**ODATA_HEADERS, **err.headers})


def reply(body: dict, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.json_response(body, status=status, headers={**ODATA_HEADERS, **(headers or {})})


def no_content() -> web.Response:
    return web.Response(status=204, headers=ODATA_HEADERS)


def not_found(path: str) -> RedfishError:
    return RedfishError(404, "ResourceNotFound", f"The resource at {path} was not found.", path)


async def read_json(request: web.Request, *, empty_ok: bool = False) -> dict:
    raw = await request.read()
    if not raw.strip() and empty_ok:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise RedfishError(400, "MalformedJSON", "The request body submitted was malformed JSON.") from None
    if not isinstance(body, dict):
        raise RedfishError(400, "MalformedJSON", "The request body must be a JSON object.")
    return body


def check_writes(body: dict, current: dict, writable: dict, prefix: str = "") -> list[RedfishError]:
    """Every problem with a PATCH body: read-only or unknown properties, values not allowed.

    `writable` maps a property to its allowed values, to a nested mapping, or to None (checked later).
    """
    errors = []
    for key, value in body.items():
        if key.startswith("@odata."):
            continue
        name = f"{prefix}{key}"
        if key not in writable:
            if key in current:
                errors.append(
                    RedfishError(400, "PropertyNotWritable", f"The property {name} is a read only property.", name)
                )
            else:
                errors.append(
                    RedfishError(
                        400, "PropertyUnknown", f"The property {name} is not in the list of valid properties.", name
                    )
                )
        elif isinstance(writable[key], dict):
            if isinstance(value, dict):
                errors += check_writes(value, current.get(key) or {}, writable[key], f"{name}/")
            else:
                errors.append(
                    RedfishError(400, "PropertyValueTypeError", f"The value for {name} must be an object.", name)
                )
        elif writable[key] is not None and value not in writable[key]:
            errors.append(
                RedfishError(
                    400,
                    "PropertyValueNotInList",
                    f"The value {value!r} for {name} is not in the list of acceptable values.",
                    json.dumps(value),
                    name,
                )
            )
    return errors


def reject(errors: list[RedfishError]) -> None:
    """Reject a PATCH whole, with one ExtendedInfo message per problem."""
    if errors:
        first, *rest = errors
        for err in rest:
            first.messages += err.messages
        raise first
