"""An organisation's own administration through the API: its keys, its members and invitations.
Reading is any member's; changing is an admin's (IsTenant, `administers`)."""

from __future__ import annotations

from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.error_schema import ERROR
from core.errors import Forbidden
from reservations import access
from reservations.api.organisation_serializers import (
    ActivitySerializer,
    ApiKeyRequestSerializer,
    ApiKeySerializer,
    InvitationRequestSerializer,
    InvitationSerializer,
    MemberChangeSerializer,
    MemberSerializer,
    NewApiKeySerializer,
)
from reservations.api.views import IsTenant, caller_of
from reservations.models import Activity, Membership
from reservations.services import api_keys, members


class ApiKeyListView(generics.GenericAPIView):
    """GET: the organisation's live keys, by prefix. POST: a new key (201), shown this once."""

    permission_classes = [IsTenant]
    administers = True
    serializer_class = ApiKeySerializer

    def get_queryset(self):
        return api_keys.live_keys(caller_of(self.request).tenant).select_related("created_by")

    def get(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(ApiKeySerializer(page, many=True).data)

    @extend_schema(request=ApiKeyRequestSerializer, responses={201: NewApiKeySerializer, 400: ERROR, 409: ERROR})
    def post(self, request):
        wanted = ApiKeyRequestSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        caller = caller_of(request)
        if caller.api_key.organisation_key:
            # An organisation key acts for no person: a key it made would outlive whoever is accountable.
            raise Forbidden("an organisation key makes no keys: a member's key does")
        issued = api_keys.issue_key(
            tenant=caller.tenant,
            name=wanted.validated_data["name"],
            scope=access.Scope(wanted.validated_data["scope"]),
            expires_at=wanted.validated_data.get("expires_at"),
            created_by=caller.user,
            organisation_key=wanted.validated_data["organisation_key"],
        )
        answer = NewApiKeySerializer(issued.api_key, context={"key": issued.key})
        return Response(answer.data, status=status.HTTP_201_CREATED)


class ApiKeyDetailView(APIView):
    permission_classes = [IsTenant]
    administers = True

    @extend_schema(responses={204: None, 404: ERROR})
    def delete(self, request, pk: int):
        """Revoke the key: every request with it is a 401 from now on."""
        if not api_keys.revoke_key(tenant=caller_of(request).tenant, key_id=pk):
            raise Http404
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberListView(generics.GenericAPIView):
    """GET: the organisation's members and their roles."""

    permission_classes = [IsTenant]
    serializer_class = MemberSerializer

    def get_queryset(self):
        tenant = caller_of(self.request).tenant
        return Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")

    def get(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(MemberSerializer(page, many=True).data)


class MemberDetailView(APIView):
    permission_classes = [IsTenant]
    administers = True

    @extend_schema(
        request=MemberChangeSerializer, responses={200: MemberSerializer, 400: ERROR, 404: ERROR, 409: ERROR}
    )
    def patch(self, request, pk: int):
        """Change the member's role: their keys act with the new one from the next request."""
        wanted = MemberChangeSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        member = members.change_role(
            tenant=caller_of(request).tenant, membership_id=pk, role=access.Role(wanted.validated_data["role"])
        )
        return Response(MemberSerializer(member).data)

    @extend_schema(responses={204: None, 404: ERROR, 409: ERROR})
    def delete(self, request, pk: int):
        """Remove the member: their own keys stop working; organisation keys they made do not."""
        members.remove_member(tenant=caller_of(request).tenant, membership_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberSessionsView(APIView):
    permission_classes = [IsTenant]
    administers = True

    @extend_schema(responses={204: None, 404: ERROR})
    def delete(self, request, pk: int):
        """Sign the member out: their pages signed in before now no longer act for the organisation
        until they sign in again. Their keys keep working: revoke those one by one."""
        members.sign_out_member(tenant=caller_of(request).tenant, membership_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationListView(APIView):
    permission_classes = [IsTenant]
    administers = True

    @extend_schema(request=InvitationRequestSerializer, responses={201: InvitationSerializer, 400: ERROR})
    def post(self, request):
        """Invite a person: the link, which works once and for 7 days, is answered once."""
        wanted = InvitationRequestSerializer(data=request.data)
        wanted.is_valid(raise_exception=True)
        caller = caller_of(request)
        invited = members.invite(
            tenant=caller.tenant,
            email=wanted.validated_data["email"],
            role=access.Role(wanted.validated_data["role"]),
            created_by=None if caller.api_key.organisation_key else caller.user,
        )
        url = request.build_absolute_uri(reverse("invitation", args=[invited.token]))
        answer = InvitationSerializer({"url": url, "expires_at": invited.invitation.expires_at})
        return Response(answer.data, status=status.HTTP_201_CREATED)


class ActivityListView(generics.GenericAPIView):
    """GET: the organisation's activity, newest first: who changed its keys, members, webhooks and SSH keys."""

    permission_classes = [IsTenant]
    serializer_class = ActivitySerializer

    def get_queryset(self):
        return Activity.objects.filter(tenant=caller_of(self.request).tenant).order_by("-at", "-id")

    def get(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(ActivitySerializer(page, many=True).data)
