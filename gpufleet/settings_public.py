"""The public listener: the same settings, the read-only URLconf."""

from gpufleet.settings import *  # noqa: F403

ROOT_URLCONF = "gpufleet.urls_public"
