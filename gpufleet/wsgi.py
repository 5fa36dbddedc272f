"""WSGI entry point of the private listener (full API, admin, fleet floor)."""

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
