from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows"

    def ready(self):
        from workflows import handlers  # noqa: F401  (connects the signal receivers)
