"""Every route of a listener's URLconf, for the tests that walk them all."""

from django.urls import URLResolver, get_resolver


def patterns(urlconf: str, resolver=None, prefix: str = ""):
    """(route, pattern) of every URL pattern of `urlconf`, included ones too, the route as Django prints it."""
    for entry in (resolver or get_resolver(urlconf)).url_patterns:
        if isinstance(entry, URLResolver):
            yield from patterns(urlconf, entry, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern), entry
