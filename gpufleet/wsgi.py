"""WSGI entry point of the private listener (full API, admin, fleet floor)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpufleet.settings")
application = get_wsgi_application()
