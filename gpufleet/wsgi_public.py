"""WSGI entry point of the public, read-only listener (gunicorn gpufleet.wsgi_public, :8001)."""

import os

from django.core.wsgi import get_wsgi_application

# Forced, not defaulted: whatever the environment says, this listener serves the public URLconf.
os.environ["DJANGO_SETTINGS_MODULE"] = "gpufleet.settings_public"
application = get_wsgi_application()
