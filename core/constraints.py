"""Conditions the apps' CHECK constraints share."""

from django.db import models
from django.db.models import F, Func
from django.db.models.lookups import Exact


def json_type_is(field: str, kind: str) -> Exact:
    """The JSON field holds an object, an array...: what the code reads it as."""
    return Exact(Func(F(field), function="jsonb_typeof", output_field=models.TextField()), kind)
