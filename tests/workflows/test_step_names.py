"""Every step of every workflow runs under a name of its own from fleet.workflow_steps, and every
name there belongs to some workflow: a node stores the name, and resumes at it."""

from fleet.workflow_steps import StepName
from workflows.node_workflows.engine import WORKFLOWS


def test_each_workflow_names_each_of_its_steps_once():
    for workflow in WORKFLOWS.values():
        names = [name for name, _ in workflow.steps]
        assert len(names) == len(set(names))


def test_every_step_name_is_a_step_of_some_workflow():
    used = {name for workflow in WORKFLOWS.values() for name, _ in workflow.steps}
    assert used == set(StepName)
