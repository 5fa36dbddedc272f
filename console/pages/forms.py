"""The tenant's page's forms: what a browser posts, checked before any service is asked.

They read the request's text only: choices (pods, images, the tenant's own SSH keys) are built
from the database when the form is, so that no posted value reaches a query. The services keep
the last word on everything else (the period's rules, placement, the quota).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from core import clock
from core.parsing import InvalidInput, parse_int
from fleet.models import Image, Pod
from fleet.selectors import fabric_levels, gpu_models
from reservations.api.serializers import MAX_NODES_PER_RESERVATION
from reservations.models import MAX_USER_DATA_BYTES, SSHKey, Tenant, user_data_too_large
from reservations.offers import Offer

# Past the longest maximum duration an operator would set; bounds the date arithmetic too.
MAX_HOURS = 24 * 3660
UTC_MINUTE = "%Y-%m-%dT%H:%M"  # what <input type="datetime-local"> shows and sends


def _datetime_field(label: str, help_text: str = "") -> forms.DateTimeField:
    widget = forms.DateTimeInput(attrs={"type": "datetime-local"}, format=UTC_MINUTE)
    return forms.DateTimeField(label=label, required=False, widget=widget, help_text=help_text)


class WholeNumberField(forms.IntegerField):
    """A whole number in the digits 0 to 9, as core.parsing reads one everywhere else: Django's
    own IntegerField takes "١٢", "1_000" and "+3"."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return parse_int(str(value).strip())
        except InvalidInput as error:
            raise ValidationError(str(error), code="invalid") from error


def add_refusal(form: forms.Form, field: str, reason: str, *, aliases: dict[str, str] | None = None) -> None:
    """A service's refusal that names a request field, shown next to the form's field of that
    name (or the one `aliases` maps it to), or above the form, naming it, if the form has none."""
    field = (aliases or {}).get(field, field)
    if field in form.fields:
        form.add_error(field, reason)
    else:
        form.add_error(None, f"{field}: {reason}")


class PageForm(forms.Form):
    """Labels without Django's trailing colon."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


class ReserveForm(PageForm):
    """POST /v1/reservations as a form: the period as an end or a duration from the start."""

    node_count = WholeNumberField(label="Nodes", min_value=1, max_value=MAX_NODES_PER_RESERVATION, initial=1)
    pod = forms.ChoiceField(label="Pod", required=False)
    rack_scale = forms.BooleanField(label="Whole racks only (rack-scale)", required=False)
    preferred = forms.ChoiceField(
        label="Fewest domains of",
        required=False,
        help_text="A fabric level: it spans as few of its domains as it can.",
    )
    gpu_model = forms.ChoiceField(label="GPU model", required=False)
    starts_at = _datetime_field("Start (UTC)", "Empty: now.")
    ends_at = _datetime_field("End (UTC)", "Or a duration below; neither: the longest a reservation may last.")
    hours = WholeNumberField(label="Duration (hours)", required=False, min_value=1, max_value=MAX_HOURS)
    image = forms.ChoiceField(label="Image", required=False)
    ssh_keys = forms.MultipleChoiceField(label="SSH keys", required=False, widget=forms.CheckboxSelectMultiple)
    user_data = forms.CharField(
        label="User data",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 48, "spellcheck": "false"}),
        help_text=f"cloud-init: a #cloud-config document or a script, at most {MAX_USER_DATA_BYTES} bytes.",
    )
    wait = forms.BooleanField(label="If it does not fit now, queue it at the earliest time it fits", required=False)

    def __init__(self, *args, tenant: Tenant, **kwargs):
        super().__init__(*args, **kwargs)
        # core.clock's time if a duration needed it: the booking goes by the same reading.
        self.now: datetime | None = None
        self.pods = {pod.name: pod for pod in Pod.objects.order_by("name")}
        self.images = {image.name: image for image in Image.objects.order_by("name")}
        self.keys = {str(key.pk): key for key in SSHKey.objects.filter(tenant=tenant).order_by("name")}
        self._choice_field("pod").choices = [("", "any"), *((name, name) for name in self.pods)]
        # The levels between the pod and the rack, and the rack: a pod-wide preference is no preference.
        self._choice_field("preferred").choices = [
            ("", "no preference"),
            *((level, level) for level in fabric_levels()[1:]),
        ]
        self._choice_field("gpu_model").choices = [("", "any"), *((model, model) for model in gpu_models())]
        default = next((image for image in self.images.values() if image.default), None)
        self._choice_field("image").choices = [
            (name, f"{name} ({image.os}){' · default' if image.default else ''}") for name, image in self.images.items()
        ] or [("", "the fleet's default image")]
        self.fields["image"].initial = default.name if default else ""
        self._choice_field("ssh_keys").choices = [
            (pk, f"{key.name} {key.fingerprint}") for pk, key in self.keys.items()
        ]

    def _choice_field(self, name: str) -> forms.ChoiceField:
        """This form's copy of a declared choice field, whose choices come from the database."""
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField), f"{name} is not a choice field"
        return field

    def clean_user_data(self) -> str:
        # A browser sends a textarea's line breaks as CRLF: a script's "#!/bin/sh\r" would not run.
        text = self.cleaned_data["user_data"].replace("\r\n", "\n")
        if refusal := user_data_too_large(text):
            raise ValidationError(refusal)
        return text

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        starts_at, ends_at, hours = data.get("starts_at"), data.get("ends_at"), data.get("hours")
        if ends_at is not None and hours is not None:
            self.add_error("hours", "give an end or a duration, not both")
        elif hours is not None:
            self.now = now = clock.now()  # a start that is missing or past means now, as for the service
            try:
                data["ends_at"] = ends_at = max(starts_at or now, now) + timedelta(hours=hours)
            except OverflowError:
                self.add_error("hours", "ends past the last date there is")
        if starts_at is not None and ends_at is not None and ends_at <= starts_at:
            self.add_error("ends_at", "must be after the start")
        return data

    def booking(self) -> dict:
        """The valid form as create_reservation's keyword arguments."""
        data = self.cleaned_data
        return {
            "node_count": data["node_count"],
            "pod": self.pods.get(data["pod"]),
            "rack_scale": data["rack_scale"],
            "preferred": data["preferred"] or None,
            "gpu_model": data["gpu_model"] or None,
            "starts_at": data["starts_at"],
            "ends_at": data["ends_at"],
            "image": self.images.get(data["image"]),
            "ssh_keys": [self.keys[pk] for pk in data["ssh_keys"]],
            "user_data": data["user_data"],
            "wait": data["wait"],
            "now": self.now,
        }

    def refuse(self, field: str, reason: str) -> None:
        # An end the tenant gave as a duration is refused next to the duration.
        aliases = {"ends_at": "hours"} if self.cleaned_data.get("hours") is not None else {}
        add_refusal(self, field, reason, aliases=aliases)

    def taking(self, offer: Offer) -> list[tuple[str, str]]:
        """The fields that post this request again at exactly the offer's period and pod."""
        data = self.cleaned_data
        fields = [
            ("node_count", str(data["node_count"])),
            ("pod", offer.pod),
            ("starts_at", offer.starts_at.isoformat()),
            ("ends_at", offer.ends_at.isoformat()),
            ("image", data["image"]),
            ("user_data", data["user_data"]),
            ("preferred", data["preferred"]),
            ("gpu_model", data["gpu_model"]),
            *(("ssh_keys", pk) for pk in data["ssh_keys"]),
        ]
        if data["rack_scale"]:
            fields.append(("rack_scale", "on"))
        return fields


class ExtendForm(PageForm):
    """A reservation's new end: a date, or hours after its current end."""

    ends_at = _datetime_field("New end (UTC)")
    hours = WholeNumberField(label="or + hours", required=False, min_value=1, max_value=MAX_HOURS)

    def __init__(self, *args, current_end: datetime | None, **kwargs):
        super().__init__(*args, **kwargs)
        self.current_end = current_end

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        ends_at, hours = data.get("ends_at"), data.get("hours")
        if self.errors:
            return data
        if (ends_at is None) == (hours is None):
            raise ValidationError("give a new end or a number of hours to add, one of the two")
        if hours is not None:
            if self.current_end is None:
                self.add_error("hours", "an open-ended reservation has no end to add hours to: give a new end")
                return data
            try:
                data["ends_at"] = self.current_end + timedelta(hours=hours)
            except OverflowError:
                self.add_error("hours", "ends past the last date there is")
        return data

    def refuse(self, field: str, reason: str) -> None:
        aliases = {"ends_at": "hours"} if self.cleaned_data.get("hours") is not None else {}
        add_refusal(self, field, reason, aliases=aliases)

    def change(self) -> dict:
        return {"ends_at": self.cleaned_data["ends_at"]}


class NodeCountForm(PageForm):
    """Grow or shrink a reservation: the node count it should have."""

    node_count = WholeNumberField(label="New node count", min_value=1, max_value=MAX_NODES_PER_RESERVATION)

    def refuse(self, field: str, reason: str) -> None:
        add_refusal(self, field, reason)

    def change(self) -> dict:
        return {"node_count": self.cleaned_data["node_count"]}
