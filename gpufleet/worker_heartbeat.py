"""The worker's heartbeat (gpufleet/heartbeat.py), written from the consumer's event loop."""

from pathlib import Path

from celery import bootsteps
from django.conf import settings

from gpufleet import heartbeat


class HeartbeatFile(bootsteps.StartStopStep):
    """Touches the worker's heartbeat (GPUFLEET_HEARTBEAT_FILE) every INTERVAL_SECONDS from a timer
    on the consumer's event loop, so a loop that hangs lets it go stale. It stops too while the
    broker is unreachable: the probe's --max-age says how long an outage the worker rides out."""

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.enabled = bool(settings.HEARTBEAT_FILE)
        self.path = heartbeat.file_of(Path(settings.HEARTBEAT_FILE), heartbeat.WORKER)
        self.timer_entry = None

    def start(self, parent):
        heartbeat.touch(self.path)
        self.timer_entry = parent.timer.call_repeatedly(heartbeat.INTERVAL_SECONDS, heartbeat.touch, (self.path,))

    def stop(self, parent):
        if self.timer_entry is not None:
            self.timer_entry.cancel()
            self.timer_entry = None
