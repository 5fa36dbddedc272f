"""Settings for the test run: the project's own, with a broker database of the tests' own."""

import os

from gpufleet.settings import *  # noqa: F403

REDIS_URL = os.environ.get("GPUFLEET_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
CELERY_BROKER_URL = REDIS_URL
