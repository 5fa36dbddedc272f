"""An organisation's members: their roles changed, members removed, people invited with a link that
works once and expires. An organisation always keeps an admin."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from core import clock
from core.errors import Conflict, NotFound
from reservations import access, activity
from reservations.models import ActivityKind, Invitation, Membership, Tenant

INVITATION_LIFETIME = timedelta(days=7)


class LastAdmin(Conflict):
    pass


class InvitationRefused(Conflict):
    """Used already, expired, or for a person who is a member already."""


@dataclass(frozen=True)
class Invited:
    token: str  # in the link, shown once; only its digest is kept
    invitation: Invitation


def add_member(*, tenant: Tenant, user: User, role: access.Role) -> Membership:
    """An operator makes `user` a member with `role` (the admin's inline, create_tenant --admin), or
    changes the role of one who is already."""
    with transaction.atomic():
        member = _locked_members(tenant).filter(user=user).first()
        if member is not None:
            return change_role(tenant=tenant, membership_id=member.pk, role=role)
        member = Membership.objects.create(tenant=tenant, user=user, role=role.value)
        activity.record(tenant, ActivityKind.MEMBER_JOINED, member=user.get_username(), role=role.value)
    return member


def change_role(*, tenant: Tenant, membership_id: int, role: access.Role) -> Membership:
    with transaction.atomic():
        member = _locked_members(tenant).filter(pk=membership_id).first()
        if member is None:
            raise NotFound("no such member")
        if member.role == access.Role.ADMIN and role is not access.Role.ADMIN:
            _keep_an_admin(tenant, leaving=member)
        before, member.role = member.role, role.value
        member.save(update_fields=["role"])
        username = member.user.get_username()
        activity.record(tenant, ActivityKind.MEMBER_ROLE_CHANGED, member=username, role=role.value, was=before)
    return member


def remove_member(*, tenant: Tenant, membership_id: int) -> None:
    """The member leaves: their keys stop working and their pages show nothing of the organisation
    from their next request (both look the membership up every time)."""
    with transaction.atomic():
        member = _locked_members(tenant).filter(pk=membership_id).first()
        if member is None:
            raise NotFound("no such member")
        if member.role == access.Role.ADMIN:
            _keep_an_admin(tenant, leaving=member)
        member.delete()
        activity.record(tenant, ActivityKind.MEMBER_REMOVED, member=member.user.get_username(), role=member.role)


def sign_out_member(*, tenant: Tenant, membership_id: int) -> Membership:
    """End the member's signed-in sessions for this organisation: pages signed in before now show
    it nothing until they sign in again (console.pages.sessions). Their keys are revoked apart."""
    with transaction.atomic():
        member = Membership.objects.select_for_update().filter(tenant=tenant, pk=membership_id).first()
        if member is None:
            raise NotFound("no such member")
        member.signed_out_at = clock.now()
        member.save(update_fields=["signed_out_at"])
        activity.record(tenant, ActivityKind.MEMBER_SIGNED_OUT, member=member.user.get_username())
    return member


def _locked_members(tenant: Tenant):
    """The organisation's memberships, locked together (in id order) so that two admins cannot
    each demote the other and leave none."""
    members = Membership.objects.select_for_update().filter(tenant=tenant).order_by("pk")
    list(members.values_list("pk", flat=True))
    return members


def _keep_an_admin(tenant: Tenant, *, leaving: Membership) -> None:
    others = Membership.objects.filter(tenant=tenant, role=access.Role.ADMIN.value).exclude(pk=leaving.pk)
    if not others.exists():
        raise LastAdmin("an organisation keeps at least one admin: make another member admin first")


def invite(*, tenant: Tenant, email: str, role: access.Role, created_by: User | None) -> Invited:
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
        invitation = Invitation.objects.create(
            tenant=tenant,
            email=email,
            role=role.value,
            digest=access.digest(token),
            created_by=created_by,
            expires_at=clock.now() + INVITATION_LIFETIME,
        )
        activity.record(tenant, ActivityKind.MEMBER_INVITED, email=email, role=role.value)
    return Invited(token=token, invitation=invitation)


def pending_invitation(token: str) -> Invitation | None:
    """The invitation a link's token names, while it can still be accepted."""
    return (
        Invitation.objects.select_related("tenant")
        .filter(digest=access.digest(token), accepted_at__isnull=True, expires_at__gt=Now())
        .first()
    )


def accept_invitation(*, token: str, user: User) -> Membership:
    """`user` joins the invitation's organisation, and only that one, with its role. Compare-and-set:
    of two acceptances of one link, one wins; an expired or used link is refused."""
    with transaction.atomic():
        now = clock.now()
        taken = Invitation.objects.filter(
            digest=access.digest(token), accepted_at__isnull=True, expires_at__gt=now
        ).update(accepted_at=now, accepted_by=user)
        if taken != 1:
            raise InvitationRefused("this invitation was used already, has expired, or does not exist")
        invitation = Invitation.objects.select_related("tenant").get(digest=access.digest(token))
        try:
            with transaction.atomic():
                membership = Membership.objects.create(tenant=invitation.tenant, user=user, role=invitation.role)
        except IntegrityError as error:
            raise InvitationRefused(f"you are a member of {invitation.tenant.name} already") from error
        username = user.get_username()
        activity.record(invitation.tenant, ActivityKind.MEMBER_JOINED, member=username, role=invitation.role)
        return membership
