"""The models' choices spell out the pure modules' enums member by member (django-stubs types
the class form of TextChoices, not the functional one): a member added to one must be added to
the other, or the database's CHECKs and the admin's forms would refuse a value the rules use."""

import pytest

from fleet import fabric_health, lifecycle, rollout_rules
from fleet.models import nodes, rollouts, topology


@pytest.mark.parametrize(
    "choices, domain",
    [
        (nodes.NodeState, list(lifecycle.State)),
        (nodes.NodeEvent, list(lifecycle.Event)),
        (rollouts.RolloutStatus, list(rollout_rules.RolloutStatus)),
        (rollouts.RolloutNodeStatus, list(rollout_rules.NodeStatus)),
        (topology.SwitchHealth, list(fabric_health.HEALTHS)),
    ],
)
def test_every_member_of_the_domain_is_a_choice_and_nothing_else(choices, domain):
    assert sorted(choices.values) == sorted(str(member) for member in domain)
