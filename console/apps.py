from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"

    def ready(self):
        from django.contrib.auth.signals import user_logged_in

        from console.pages.sessions import note_sign_in

        user_logged_in.connect(note_sign_in, dispatch_uid="console.pages.sessions.note_sign_in")
