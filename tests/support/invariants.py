"""Every check of `manage.py check_invariants` at once, for tests that assert a history is sound."""

from console.invariants import CHECKS, Violation


def check_all() -> list[Violation]:
    return [violation for check in CHECKS.values() for violation in check()]
