from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "reservations"

    def ready(self):
        from reservations import handlers  # noqa: F401  (connects the signal receivers)
