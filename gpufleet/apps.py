from django.apps import AppConfig


class GpufleetConfig(AppConfig):
    """The project package as an app, for its system checks."""

    name = "gpufleet"

    def ready(self):
        from gpufleet import checks  # noqa: F401  (registers them)
