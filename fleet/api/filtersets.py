"""The node list's filters: one FilterSet for GET /v1/nodes (both listeners) and the fleet floor.

?state=, ?pod=, ?rack=, each may repeat; repeated values are OR'ed. An unknown state is a 400,
not an empty page; a pod or rack no node is in simply matches no node.
"""

import django_filters
from django import forms
from django_filters.fields import MultipleChoiceField

from fleet.models import Node, NodeState


class StateField(MultipleChoiceField):
    def validate(self, value):
        # Every unknown state at once, and the states there are: Django's message names only the first.
        unknown = sorted(set(value) - set(NodeState.values))
        if unknown:
            # As params, not in the text: django-filter %-formats the message, and a state may hold a "%".
            raise forms.ValidationError(
                "unknown state %(unknown)s; one of %(states)s",
                code="invalid_choice",
                params={"unknown": ", ".join(unknown), "states": ", ".join(NodeState.values)},
            )
        super().validate(value)


class NameField(MultipleChoiceField):
    def valid_value(self, value):
        # Any name: pods and racks come and go, and a filter on one that is not there finds nothing.
        return True


class StateFilter(django_filters.MultipleChoiceFilter):
    field_class = StateField


class NameFilter(django_filters.MultipleChoiceFilter):
    field_class = NameField


class NodeFilterSet(django_filters.FilterSet):
    # distinct=False: every lookup here is to-one, so no row can come twice.
    state = StateFilter(choices=NodeState.choices, distinct=False, help_text="A state; repeat for several.")
    # null_value=None: a pod or rack named "null" is a name, not django-filter's "is empty".
    pod = NameFilter(
        field_name="rack__pod__name", distinct=False, null_value=None, help_text="A pod's name; repeat for several."
    )
    rack = NameFilter(
        field_name="rack__name", distinct=False, null_value=None, help_text="A rack's name; repeat for several."
    )

    class Meta:
        model = Node
        fields = ["state", "pod", "rack"]
