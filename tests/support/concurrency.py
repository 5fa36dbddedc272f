"""Races on the real database: functions run in threads of their own, released together."""

import threading
from collections.abc import Callable

from django.db import connection


def at_once(*work: Callable[[], None]) -> None:
    """Run each function in its own thread, all released by one barrier, and wait for them all.
    Each thread has its own database connection (Django's are per thread), closed at its end."""
    barrier = threading.Barrier(len(work))

    def run(function: Callable[[], None]) -> None:
        barrier.wait()
        try:
            function()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(function,)) for function in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
