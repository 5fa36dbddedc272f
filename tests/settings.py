"""Settings for the test run: the project's own, with a broker database of the tests' own."""

import os
import uuid

from django.conf import global_settings

from gpufleet.settings import *  # noqa: F403

REDIS_URL = os.environ.get("GPUFLEET_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# Under pytest -n each process (gw0, gw1, ...) gets a broker database of its own, the ones below the
# run's: a test that empties its broker must not empty another process's.
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    server, number = REDIS_URL.rsplit("/", 1)
    REDIS_URL = f"{server}/{(int(number) - 1 - int(worker.removeprefix('gw'))) % 16}"
CELERY_BROKER_URL = REDIS_URL
# Two test runs on one machine (a developer's and a fresh clone's) each get their own database.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("GPUFLEET_TEST_DATABASE", "test_gpufleet")}  # noqa: F405
# The throttles' counts in the tests' Redis, under a prefix of this run's own: tenants' ids
# start again at 1 in every run, and must not inherit an earlier run's counts.
CACHES["default"] |= {"LOCATION": REDIS_URL, "KEY_PREFIX": f"test-{uuid.uuid4().hex}"}  # noqa: F405
# Users' passwords hashed quickly (tests/support/passwords.py); any other hash is still checked.
PASSWORD_HASHERS = ["tests.support.passwords.QuickPBKDF2PasswordHasher", *global_settings.PASSWORD_HASHERS]
# PostgreSQL, with a flush after each committing test that deletes the rows it wrote rather than
# truncating every table (tests/support/quick_flush).
DATABASES["default"]["ENGINE"] = "tests.support.quick_flush"  # noqa: F405
# whitenoise finds a static file when one is asked for, rather than indexing all of them (the admin's
# too, about 40 ms) each time a test's client loads the middleware, hundreds of times a run.
WHITENOISE_AUTOREFRESH = True
