"""WSGI entry point of the private listener (full API, admin, fleet floor)."""

import gc
import logging
import os

from django.core.wsgi import get_wsgi_application
from django.db import DatabaseError, connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpufleet.settings")
application = get_wsgi_application()

from reservations.selectors import warm_placement  # noqa: E402 (needs the apps loaded above)

# Each worker process imports this module: it places reservations with its own kept topology
# and index, so it builds them before its first request rather than during it.
try:
    warm_placement()
except DatabaseError as error:
    logging.getLogger(__name__).warning("placement was not warmed, the first request will: %s", error)
finally:
    connections.close_all()  # the requests' threads open their own
    # What is loaded and built by now lives as long as the process (at 100,000 nodes, hundreds of
    # thousands of objects of the topology and index): out of the collector's full passes, which
    # walked them all, for hundreds of milliseconds, inside some request.
    gc.freeze()
