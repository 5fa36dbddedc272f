"""What the API answers and accepts about an organisation itself: its keys, members and invitations."""

from __future__ import annotations

from django.contrib.auth.models import User
from rest_framework import serializers

from core.api import StrictBooleanField, StrictInputSerializer
from reservations.models import ROLES, SCOPES, Activity, ApiKey, Membership


class ApiKeyRequestSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=100)
    scope = serializers.ChoiceField(choices=SCOPES, default="read-write")
    expires_at = serializers.DateTimeField(required=False, allow_null=True, help_text="None: never expires.")
    organisation_key = StrictBooleanField(
        default=False,
        help_text="A key of the organisation's own: it acts as an admin whoever leaves, and makes no keys.",
    )


class ApiKeySerializer(serializers.ModelSerializer):
    """A key as lists show it: named by its prefix, never the key."""

    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = ApiKey
        fields = ["id", "name", "scope", "prefix", "organisation_key", "created_by", "created_at"]
        fields += ["expires_at", "last_used_at"]
        read_only_fields = fields


class NewApiKeySerializer(ApiKeySerializer):
    """The answer to its creation: the one time the key itself is shown."""

    key = serializers.SerializerMethodField(help_text="gf_...: shown now and never again; only its digest is kept.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]
        read_only_fields = fields

    def get_key(self, _api_key) -> str:
        return self.context["key"]


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.EmailField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "username", "email", "role"]
        read_only_fields = fields


class MemberChangeSerializer(StrictInputSerializer):
    role = serializers.ChoiceField(choices=ROLES)


class InvitationRequestSerializer(StrictInputSerializer):
    email = serializers.EmailField(max_length=254)
    role = serializers.ChoiceField(choices=ROLES, default="member")


class InvitationSerializer(serializers.Serializer):
    url = serializers.URLField(help_text="Works once, for 7 days: whoever opens it signed in joins the organisation.")
    expires_at = serializers.DateTimeField()


class ActivitySerializer(serializers.ModelSerializer):
    """A change to the organisation, and who made it: the person and the key's prefix (empty where
    none: an organisation key names no person; an operator's change in the admin names neither)."""

    class Meta:
        model = Activity
        fields = ["id", "at", "event", "user", "key", "detail"]
        read_only_fields = fields
