"""The admin actions' own permissions (`change` is too broad), and the audited BMC access change."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0004_topology_version"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="node",
            options={
                "ordering": ["name"],
                "permissions": [
                    ("quarantine_node", "Can quarantine a node"),
                    ("return_node_to_service", "Can return a node to service"),
                    ("put_node_into_maintenance", "Can put a node into maintenance"),
                ],
            },
        ),
        migrations.RemoveConstraint(
            model_name="auditevent",
            name="audit_event_known",
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="event",
            field=models.CharField(
                choices=[
                    ("inspection_started", "Inspection Started"),
                    ("inspection_passed", "Inspection Passed"),
                    ("inspection_failed", "Inspection Failed"),
                    ("attestation_passed", "Attestation Passed"),
                    ("attestation_failed", "Attestation Failed"),
                    ("provision_requested", "Provision Requested"),
                    ("provision_succeeded", "Provision Succeeded"),
                    ("provision_failed", "Provision Failed"),
                    ("released", "Released"),
                    ("wipe_succeeded", "Wipe Succeeded"),
                    ("wipe_failed", "Wipe Failed"),
                    ("hardware_fault", "Hardware Fault"),
                    ("operator_quarantine", "Operator Quarantine"),
                    ("operator_maintenance", "Operator Maintenance"),
                    ("operator_return", "Operator Return"),
                    ("enrolled", "Enrolled"),
                    ("step_changed", "Step Changed"),
                    ("result_discarded", "Result Discarded"),
                    ("bmc_changed", "BMC access changed"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddConstraint(
            model_name="auditevent",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "event__in",
                        [
                            "inspection_started",
                            "inspection_passed",
                            "inspection_failed",
                            "attestation_passed",
                            "attestation_failed",
                            "provision_requested",
                            "provision_succeeded",
                            "provision_failed",
                            "released",
                            "wipe_succeeded",
                            "wipe_failed",
                            "hardware_fault",
                            "operator_quarantine",
                            "operator_maintenance",
                            "operator_return",
                            "enrolled",
                            "step_changed",
                            "result_discarded",
                            "bmc_changed",
                        ],
                    )
                ),
                name="audit_event_known",
            ),
        ),
    ]
