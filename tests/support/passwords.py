"""A password hasher for the tests' users."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 with a thousand iterations, not a million: a test's passwords guard
    nothing, and a million cost a quarter of a second a hash, on every user a test makes and
    every login. The algorithm and format are Django's own, with the iterations written into each
    hash, so a control-plane process that a test starts with the project's settings checks these
    passwords as they are."""

    iterations = 1000
