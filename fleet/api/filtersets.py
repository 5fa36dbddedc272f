from rest_framework.exceptions import ValidationError

from fleet.models import NodeState

FILTERS = {"state": "state", "pod": "rack__pod__name", "rack": "rack__name"}


def filter_nodes(queryset, params):
    """?state=, ?pod=, ?rack= (each may repeat); an unknown state is a 400, not an empty page."""
    for param, field in FILTERS.items():
        values = params.getlist(param)
        if not values:
            continue
        if param == "state" and (unknown := sorted(set(values) - set(NodeState.values))):
            raise ValidationError(
                {"state": [f"unknown state {', '.join(unknown)}; one of {', '.join(NodeState.values)}"]}
            )
        queryset = queryset.filter(**{f"{field}__in": values})
    return queryset
