import json
from pathlib import Path
from typing import Any

import requests
from django.core.management.base import CommandError


def read_json(source: str) -> Any:
    """A JSON document from a file or an http(s) URL, or a CommandError saying what went wrong.
    The document is untrusted, of any shape: its reader checks it."""
    try:
        if source.startswith(("http://", "https://")):
            answer = requests.get(source, timeout=30)
            answer.raise_for_status()
            return answer.json()
        return json.loads(Path(source).read_text(encoding="utf-8"))
    except (OSError, ValueError, requests.RequestException) as error:
        raise CommandError(f"cannot read JSON from {source}: {error}") from error
