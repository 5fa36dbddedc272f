"""What every command of `gpufleet` shares: its exit statuses, the API client, JSON output, and
how a refusal is told.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from gpufleet_client.api import ApiError, Client
from gpufleet_client.config import Config
from gpufleet_client.tables import when

OK, REFUSED, USAGE, NOT_FOUND, UNREACHABLE = 0, 1, 2, 3, 4


INTERRUPTED = 130


GIVEN_UP = {"releasing", "released", "failed"}  # a reservation in these will never become active


class Failed(Exception):
    """A command ends with this status, having said why on stderr."""

    def __init__(self, status: int, message: str = ""):
        super().__init__(message)
        self.status = status
        self.message = message


def exit_status(error: ApiError) -> int:
    if error.status is None or error.status >= 500:
        return UNREACHABLE
    if error.status == 404:
        return NOT_FOUND
    return REFUSED


def refused(error: ApiError, args: argparse.Namespace) -> int:
    """Say what the server refused, on stderr (and its JSON answer on stdout, with --json)."""
    if args.json and error.body is not None:
        emit_json(error.body)
    where = f" ({error.status})" if error.status else ""
    print(f"gpufleet: {error.detail}{where}", file=sys.stderr)
    if error.status == 401:
        print(
            "the server did not accept the API key: set GPUFLEET_KEY, or key in the config file, to a live key",
            file=sys.stderr,
        )
    offer = error.body.get("offer") if isinstance(error.body, dict) else None
    if isinstance(offer, dict):
        print(
            f"earliest fit: {when(offer.get('starts_at'))} to {when(offer.get('ends_at'))} in {offer.get('pod')}; "
            "rerun with --wait-for-capacity to queue it",
            file=sys.stderr,
        )
    return exit_status(error)


def client(config: Config, *, token: bool = True) -> Client:
    """The API client with the configured API key; token=False: the command needs none (sent if there is one)."""
    return Client(config.url, config.require_key() if token else config.key)


def emit_json(document: Any) -> None:
    print(json.dumps(document, indent=2))


def iso(value: datetime) -> str:
    return value.isoformat()


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
