import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from core import outbound


def read_url(url: str, *, max_body_bytes: int | None = None) -> Any:
    """The JSON document at an operator's http(s) URL, read through core/outbound.py (within the
    deadline and the body cap, GPUFLEET_OUTBOUND_MAX_BODY_BYTES unless `max_body_bytes` says, no
    redirect followed). Any address: the operator chose it. Raises OutboundError (also for an
    answer other than 200), or ValueError if it is not JSON."""
    answer = outbound.request(
        "GET",
        url,
        check=outbound.any_address,
        deadline=settings.OUTBOUND_DEADLINE_SECONDS,
        max_body_bytes=max_body_bytes or settings.OUTBOUND_MAX_BODY_BYTES,
        headers={"Accept": "application/json"},
    )
    if answer.status_code != 200:
        raise outbound.OutboundError(f"answered {answer.status_code}")
    return answer.json()


def read_json(source: str) -> Any:
    """A JSON document from a file or an http(s) URL, or a CommandError saying what went wrong.
    The document is untrusted, of any shape: its reader checks it."""
    try:
        if source.startswith(("http://", "https://")):
            return read_url(source)
        return json.loads(Path(source).read_text(encoding="utf-8"))
    except outbound.OutboundError as error:
        raise CommandError(f"cannot read JSON from {source}: {error.reason}") from error
    except (OSError, ValueError) as error:
        raise CommandError(f"cannot read JSON from {source}: {error}") from error
