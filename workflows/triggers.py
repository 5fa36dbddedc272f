"""At most one waiting workflow message per node.

The reconciler looks every few seconds for nodes that owe work and hold no lease. Under a
backlog those are exactly the nodes whose message is still in the queue, and re-sending them
piles up duplicates that each cost a worker a failed claim. So each message is marked in the
broker's Redis: the mark lives as long as the message may (its expiry) and is dropped when a
worker picks the message up, so work that arises after that is sent again. A Redis restart
loses marks together with the messages they mark, and the reconciler sends both again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import redis
from django.conf import settings

from core.redis_connection import redis_client

PREFIX = "gpufleet:workflow-waiting:"


@functools.cache
def _redis(url: str) -> redis.Redis:
    return redis_client(url, socket_connect_timeout=2, socket_timeout=5)


def _client() -> redis.Redis:
    return _redis(settings.CELERY_BROKER_URL)


def mark_waiting(node_ids: Iterable[int]) -> list[int]:
    """Mark a message as waiting for each node that has none; the nodes that were marked now."""
    node_ids = list(node_ids)
    if not node_ids:
        return []
    pipeline = _client().pipeline(transaction=False)
    for node_id in node_ids:
        pipeline.set(f"{PREFIX}{node_id}", 1, nx=True, ex=max(1, round(settings.WORKFLOW_MESSAGE_EXPIRES)))
    return [node_id for node_id, marked in zip(node_ids, pipeline.execute(), strict=True) if marked]


def unmark(node_id: int) -> None:
    """The node's message was picked up, or never sent."""
    _client().delete(f"{PREFIX}{node_id}")
