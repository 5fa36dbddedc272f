"""Idempotency keys: the first answer to a tenant's POST /v1/reservations under a key, for its retries."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('reservations', '0003_operator_permissions'),
    ]

    operations = [
        migrations.CreateModel(
            name='IdempotencyKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=255)),
                ('request_digest', models.CharField(help_text='SHA-256 of the request body, in canonical JSON.', max_length=64)),
                ('status', models.PositiveSmallIntegerField(help_text="The first answer's HTTP status.")),
                ('answer', models.JSONField(help_text="The first answer's body.")),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='idempotency_keys', to='reservations.tenant')),
            ],
            options={
                'indexes': [models.Index(fields=['created_at'], name='idempotency_key_created_idx')],
                'constraints': [models.UniqueConstraint(fields=('tenant', 'key'), name='idempotency_key_once_per_tenant'), models.CheckConstraint(condition=models.Q(('status__in', [201, 409])), name='idempotency_key_answer_is_a_decision')],
            },
        ),
    ]
