"""Tenants, their reservations, the allocations that bind nodes to them for a period, and the
answers kept for their idempotency keys.

No node is ever booked twice for overlapping periods: the exclusion constraint on Allocation
refuses it in PostgreSQL itself, whatever the code above it does.
"""

from datetime import timedelta

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import ArrayField, DateTimeRangeField, RangeOperators
from django.contrib.postgres.indexes import GistIndex
from django.db import models
from django.db.models import F, Func, Q
from django.db.models.functions import Now
from django.db.models.lookups import LessThanOrEqual

from core import acting
from core.constraints import json_type_is
from reservations import access


class ReservationState(models.TextChoices):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    DEGRADED = "degraded"
    RELEASING = "releasing"
    RELEASED = "released"
    FAILED = "failed"


class ReservationEventKind(models.TextChoices):
    CREATED = "created"
    STARTED = "started"
    ACTIVE = "active"
    NODE_LOST = "node_lost"
    REPLACEMENT_PLACED = "replacement_placed"
    RELEASING = "releasing"
    RELEASED = "released"
    ENDING_NOTICE = "ending_notice"
    CHANGED = "changed"


# Reservations whose nodes are (or will be) held for the tenant.
LIVE_STATES = [
    ReservationState.PENDING,
    ReservationState.PROVISIONING,
    ReservationState.ACTIVE,
    ReservationState.DEGRADED,
]


# Reservations not settled yet: what the reconciler starts, provisions, heals, settles or releases.
UNSETTLED_STATES = [s for s in (*LIVE_STATES, ReservationState.RELEASING) if s != ReservationState.ACTIVE]


class Tenant(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    # The organisation's own account, which its organisation keys and pre-organisation tokens act as;
    # people are its members (Membership).
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="tenant"
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name"]
        # The admin's action; `change` would also let an operator edit the tenant.
        permissions = [
            ("revoke_tenant_tokens", "Can revoke a tenant's API tokens"),
            ("export_usage", "Can download tenants' usage"),
        ]

    def __str__(self):
        return self.name


ROLES = [(role.value, role.value) for role in access.Role]
SCOPES = [(scope.value, scope.value) for scope in access.Scope]


class Membership(models.Model):
    """A person (a Django user) in an organisation, with a role (reservations.access)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=ROLES)
    created_at = models.DateTimeField(db_default=Now())
    # An admin signed the member out: their pages signed in before then no longer act for the
    # organisation (console.sessions); their keys are revoked one by one, not by this.
    signed_out_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant", "user"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_once_per_organisation"),
            models.CheckConstraint(condition=Q(role__in=[r.value for r in access.Role]), name="membership_role_known"),
        ]

    def __str__(self):
        return f"{self.user} in {self.tenant} ({self.role})"


class ApiKey(models.Model):
    """An organisation's API key: only its SHA-256 is kept (reservations.access). A member's key acts
    with at most its maker's role while the maker remains a member; an organisation key (made by an
    admin or create_tenant) acts as an admin whoever leaves, but makes no keys. Revoked keys stay,
    for the audit rows that name them."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=16, choices=SCOPES, default=access.Scope.READ_WRITE.value)
    prefix = models.CharField(max_length=16, unique=True, help_text="gf_ and the key's id: what names it.")
    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the whole key, hex.")
    organisation_key = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys_made"
    )
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant", "-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(scope__in=[s.value for s in access.Scope]), name="api_key_scope_known"),
            models.CheckConstraint(condition=Q(digest__regex=r"^[0-9a-f]{64}$"), name="api_key_digest_is_sha256"),
            models.CheckConstraint(
                condition=Q(expires_at__isnull=True) | Q(expires_at__gt=F("created_at")),
                name="api_key_expires_after_creation",
            ),
        ]

    def __str__(self):
        return f"{self.tenant.name}/{self.name} ({self.prefix})"


class Invitation(models.Model):
    """A link that makes its holder a member of one organisation with one role: it works once and
    expires. Only its SHA-256 is kept."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=ROLES)
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="invitations_sent"
    )
    created_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="invitations_accepted"
    )

    class Meta:
        ordering = ["tenant", "-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(role__in=[r.value for r in access.Role]), name="invitation_role_known"),
            models.CheckConstraint(
                condition=Q(expires_at__gt=F("created_at")), name="invitation_expires_after_creation"
            ),
            models.CheckConstraint(
                condition=Q(accepted_at__isnull=True) | Q(accepted_at__lte=F("expires_at")),
                name="invitation_accepted_before_it_expired",
            ),
        ]

    def __str__(self):
        return f"{self.email} to {self.tenant} ({self.role})"


class ActivityKind(models.TextChoices):
    KEY_CREATED = "key_created"
    KEY_REVOKED = "key_revoked"
    MEMBER_INVITED = "member_invited"
    MEMBER_JOINED = "member_joined"
    MEMBER_ROLE_CHANGED = "member_role_changed"
    MEMBER_REMOVED = "member_removed"
    MEMBER_SIGNED_OUT = "member_signed_out"
    WEBHOOK_CREATED = "webhook_created"
    WEBHOOK_DELETED = "webhook_deleted"
    SSH_KEY_ADDED = "ssh_key_added"
    SSH_KEY_DELETED = "ssh_key_deleted"


class Activity(models.Model):
    """An organisation's own administration, append-only: who (the person and the key's prefix,
    core.acting) changed its keys, members, webhooks or SSH keys. Its reservations' history is
    ReservationEvent, which names them too."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="activity")
    at = models.DateTimeField(db_default=Now(), db_index=True)
    user = models.CharField(max_length=150, blank=True, default=acting.user, db_default="")
    key = models.CharField(max_length=16, blank=True, default=acting.key, db_default="")
    event = models.CharField(max_length=32, choices=ActivityKind.choices)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "activity"
        constraints = [
            models.CheckConstraint(
                condition=Q(event__in=[kind.value for kind in ActivityKind]), name="activity_event_known"
            ),
            models.CheckConstraint(condition=json_type_is("detail", "object"), name="activity_detail_is_object"),
        ]

    def __str__(self):
        return f"{self.tenant.name}: {self.event} by {self.user or self.key or 'an operator'}"


class Quota(models.Model):
    """What one tenant may hold, set by the operators; an empty limit is the fleet's default (or none)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    nodes = models.PositiveIntegerField(null=True, blank=True, help_text="Nodes held at once, in all pods.")
    nodes_per_pod = models.PositiveIntegerField(null=True, blank=True, help_text="Nodes held at once in one pod.")
    node_hours_per_month = models.PositiveIntegerField(
        null=True, blank=True, help_text="Node-hours booked in a calendar month (UTC), used or still ahead."
    )
    booking_horizon_days = models.PositiveIntegerField(null=True, blank=True)
    max_duration_days = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self):
        return f"quota of {self.tenant.name}"


# cloud-init reads user data from the config drive; EC2's limit, which tenants know.
MAX_USER_DATA_BYTES = 16 * 1024


def user_data_too_large(text: str) -> str | None:
    """Why `text` cannot be a reservation's user data (the API and the tenant's page say it alike);
    None if it can. The CHECK reservation_user_data_bounded holds the same limit."""
    size = len(text.encode())
    return f"at most {MAX_USER_DATA_BYTES} bytes; this is {size}" if size > MAX_USER_DATA_BYTES else None


class SSHKey(models.Model):
    """A tenant's OpenSSH public key, which its reservations put on their nodes."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=64)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=64, help_text="SHA256:..., as ssh-keygen -l prints it.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="ssh_key_name_unique_per_tenant"),
            models.UniqueConstraint(fields=["tenant", "fingerprint"], name="ssh_key_once_per_tenant"),
        ]

    def __str__(self):
        return f"{self.tenant.name}/{self.name}"


class Reservation(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="reservations")
    state = models.CharField(max_length=16, choices=ReservationState.choices, default=ReservationState.PENDING)
    node_count = models.PositiveIntegerField()
    pod = models.ForeignKey("fleet.Pod", null=True, blank=True, on_delete=models.PROTECT)
    rack_scale = models.BooleanField(default=False, help_text="Whole racks: whole_level nvlink_domain.")
    # What placement was asked for beyond the count (reservations/placement.py): healing and growth
    # ask for the same, inside the domain it was placed in.
    required_level = models.CharField(
        max_length=32, default="pod", help_text="The fabric level one domain of which holds every node."
    )
    preferred_level = models.CharField(
        max_length=32, blank=True, help_text="A level whose domains spanned placement minimises first."
    )
    whole_level = models.CharField(max_length=32, blank=True, help_text="A level whose domains are taken whole.")
    gpu_model = models.CharField(max_length=128, blank=True, help_text="Every node's GPU model; empty: any.")
    attributes = models.JSONField(default=dict, blank=True, help_text='Node attributes every node has: {"nic": "cx7"}.')
    placed_in = models.CharField(
        max_length=64, blank=True, help_text="The domain of its required level that holds its nodes."
    )
    starts_at = models.DateTimeField(db_default=Now())
    ends_at = models.DateTimeField(null=True, blank=True, help_text="Empty: open-ended.")
    reason = models.TextField(blank=True, help_text="Why it failed or is degraded.")
    placement = models.TextField(blank=True, help_text="Where placement put it, and why.")
    # What its nodes boot: an image of the catalogue (none: GPUFLEET_TENANT_IMAGE_URL, unchecked),
    # the tenant's keys and user data, through each node's config drive.
    image = models.ForeignKey("fleet.Image", null=True, blank=True, on_delete=models.PROTECT)
    ssh_keys = models.ManyToManyField(SSHKey, blank=True, related_name="reservations")
    user_data = models.TextField(blank=True, help_text="cloud-init user data, passed to the nodes untouched.")
    # The end its tenant was last told is near (reservation.ending): told again if it moves.
    ending_notice_for = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # Not columns: what the service that just created it knows of it, left on the row it returns so
    # that the answer to its tenant does not read it back (selectors.reservation_nodes and _ssh_keys).
    placed_nodes: list[str] | None = None  # the names of the nodes it holds, sorted
    placed_ssh_keys: list[int] | None = None

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("release_reservation", "Can release any tenant's reservation")]
        constraints = [
            models.CheckConstraint(condition=Q(node_count__gte=1), name="reservation_at_least_one_node"),
            models.CheckConstraint(condition=Q(state__in=ReservationState.values), name="reservation_state_known"),
            models.CheckConstraint(
                condition=Q(ends_at__isnull=True) | Q(ends_at__gt=F("starts_at")), name="reservation_ends_after_start"
            ),
            models.CheckConstraint(
                condition=~Q(state__in=[ReservationState.FAILED, ReservationState.DEGRADED]) | ~Q(reason=""),
                name="reservation_failed_or_degraded_has_reason",
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(
                    Func(F("user_data"), function="octet_length", output_field=models.IntegerField()),
                    MAX_USER_DATA_BYTES,
                ),
                name="reservation_user_data_bounded",
            ),
            models.CheckConstraint(
                condition=Q(rack_scale=Q(whole_level="nvlink_domain")), name="reservation_rack_scale_is_whole_racks"
            ),
            models.CheckConstraint(
                condition=json_type_is("attributes", "object"),
                name="reservation_attributes_object",
            ),
        ]
        indexes = [
            # The reconciler's sweep: reservations that are not over yet.
            models.Index(fields=["starts_at"], name="reservation_live_idx", condition=Q(state__in=LIVE_STATES)),
            # Its sweeps of what may owe work, in its batches' order: never the active nor history.
            models.Index(
                fields=["state", "id"], name="reservation_unsettled_idx", condition=Q(state__in=UNSETTLED_STATES)
            ),
            # What ends by now, or within the ending notice.
            models.Index(fields=["ends_at"], name="reservation_live_end_idx", condition=Q(state__in=LIVE_STATES)),
        ]

    def __str__(self):
        return f"reservation {self.pk} ({self.tenant})"


class Allocation(models.Model):
    """A node held for a reservation over a period; the period is cut short when the node leaves."""

    reservation = models.ForeignKey(Reservation, on_delete=models.PROTECT, related_name="allocations")
    node = models.ForeignKey("fleet.Node", on_delete=models.PROTECT, related_name="allocations")
    period = DateTimeRangeField()
    ended_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["reservation", "node"]
        constraints = [
            ExclusionConstraint(
                name="allocation_no_double_booking",
                expressions=[("node", RangeOperators.EQUAL), ("period", RangeOperators.OVERLAPS)],
            ),
            # Empty: a hold cut short before its period began; it overlaps nothing.
            models.CheckConstraint(
                condition=Q(period__isempty=True) | Q(period__startswith__isnull=False),
                name="allocation_period_has_start",
            ),
        ]
        # Placement asks which nodes are held over a period: the exclusion constraint's index leads
        # with the node and serves that poorly. With the node in it, the index alone answers.
        indexes = [GistIndex(fields=["period"], include=["node"], name="allocation_period_idx")]

    def __str__(self):
        return f"{self.node} for reservation {self.reservation_id}"


class ReservationEvent(models.Model):
    """A reservation's history, append-only like the node audit log."""

    reservation = models.ForeignKey(Reservation, on_delete=models.PROTECT, related_name="events")
    at = models.DateTimeField(db_default=Now())
    actor = models.CharField(max_length=128)
    # The person and the API key (its prefix) of the request that wrote the row (core.acting), if any.
    user = models.CharField(max_length=150, blank=True, default=acting.user, db_default="")
    key = models.CharField(max_length=16, blank=True, default=acting.key, db_default="")
    event = models.CharField(max_length=32, choices=ReservationEventKind.choices)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(event__in=ReservationEventKind.values), name="reservation_event_known"),
        ]

    def __str__(self):
        return f"{self.reservation_id} {self.event}"


# How long a tenant's Idempotency-Key is remembered; a retry after that is a new request.
IDEMPOTENCY_KEY_LIFETIME = timedelta(hours=24)


class IdempotencyKey(models.Model):
    """The first answer to a tenant's POST /v1/reservations under an Idempotency-Key, replayed to
    every retry with that key: a retry never makes a second reservation."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    request_digest = models.CharField(max_length=64, help_text="SHA-256 of the request body, in canonical JSON.")
    status = models.PositiveSmallIntegerField(help_text="The first answer's HTTP status.")
    answer = models.JSONField(help_text="The first answer's body.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_key_once_per_tenant"),
            # Only decisions are replayed: a created reservation or a refusal, never a bad request.
            models.CheckConstraint(condition=Q(status__in=[201, 409]), name="idempotency_key_answer_is_a_decision"),
        ]
        indexes = [
            # The reconciler's purge of expired keys.
            models.Index(fields=["created_at"], name="idempotency_key_created_idx"),
        ]

    def __str__(self):
        return f"{self.tenant} {self.key}"


class WebhookEvent(models.TextChoices):
    """What a tenant's webhook may subscribe to."""

    RESERVATION_ACTIVE = "reservation.active"
    RESERVATION_DEGRADED = "reservation.degraded"
    RESERVATION_HEALED = "reservation.healed"
    RESERVATION_ENDING = "reservation.ending"
    RESERVATION_RELEASED = "reservation.released"
    NODE_QUARANTINED = "node.quarantined"
    # A rung of the remediation ladder ahead for one of its nodes (a GPU reset, a reboot, and when),
    # or a fault of the tenant's own application that calls for nothing.
    NODE_REMEDIATION = "node.remediation"


class Webhook(models.Model):
    """Where a tenant is told what happens to its reservations, signed with its secret."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=500)
    events = ArrayField(models.CharField(max_length=32, choices=WebhookEvent.choices))
    secret = models.CharField(max_length=100, help_text="whsec_..., shown to the tenant once.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["tenant", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(events__contained_by=WebhookEvent.values) & ~Q(events=[]), name="webhook_events_known"
            ),
        ]

    def __str__(self):
        return f"{self.tenant.name}: {self.url}"


class WebhookDelivery(models.Model):
    """One event for one webhook: written in the transaction that made the event, sent by a worker
    until the receiver answers 2xx or the retries run out."""

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    message_id = models.CharField(max_length=64, unique=True, help_text="The webhook-id header.")
    event = models.CharField(max_length=32, choices=WebhookEvent.choices)
    payload = models.JSONField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(db_default=Now())
    last_status = models.PositiveIntegerField(null=True, blank=True, help_text="The receiver's HTTP status.")
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["pending", "delivered", "failed"]), name="delivery_state_known"
            ),
            models.CheckConstraint(
                condition=Q(state="delivered", delivered_at__isnull=False) | ~Q(state="delivered"),
                name="delivery_delivered_has_time",
            ),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="delivery_due_idx", condition=Q(state="pending")),
        ]

    def __str__(self):
        return f"{self.event} to webhook {self.webhook_id} ({self.state})"
