"""A System's BIOS settings (Bios, and Bios/Settings applied at the next boot) and UEFI Secure Boot.

Bios shows the attributes the node runs with; PATCH Bios/Settings {"Attributes": {...}} adds to
what is pending, which the next reset that boots takes up (state.NodeState._boot), leaving
Settings empty again; Bios.ResetBios makes the factory defaults pending. An unknown attribute, a
value of the wrong type or not among the attribute's values is a 400, and nothing is applied.

SecureBoot's SecureBootEnable is what the next boot runs with; SecureBootCurrentBoot is what the
last boot ran with, and what it measured into PCR 7 (bmcsim/evidence.py). Secure Boot runs only
with keys enrolled (SecureBootMode UserMode or DeployedMode): SecureBoot.ResetKeys DeletePK or
DeleteAllKeys leave the platform in SetupMode, ResetAllKeysToDefault enrols the defaults again.
"""

from __future__ import annotations

import json

from aiohttp import web

from .. import bios
from ..sim import Simulator
from ..state import NodeState
from .access import node_scoped
from .errors import RedfishError, check_writes, no_content, read_json, reject, reply
from .schema import SETTINGS_TYPE, odata_type, ref

APPLY_TIMES = ("OnReset",)
RESET_KEYS_ACTION = "SecureBoot.ResetKeys"
RESET_KEYS = {"ResetAllKeysToDefault": "UserMode", "DeleteAllKeys": "SetupMode", "DeletePK": "SetupMode"}


def _bios_path(node: NodeState) -> str:
    return f"/redfish/v1/Systems/{node.name}/Bios"


def bios_body(node: NodeState) -> dict:
    base = _bios_path(node)
    return {
        "@odata.type": odata_type("Bios"),
        "@odata.id": base,
        "Id": "BIOS",
        "Name": "BIOS Configuration Current Settings",
        "AttributeRegistry": bios.ATTRIBUTE_REGISTRY,
        "Attributes": dict(node.bios),
        "@Redfish.Settings": {
            "@odata.type": SETTINGS_TYPE,
            "SettingsObject": ref(f"{base}/Settings"),
            "SupportedApplyTimes": list(APPLY_TIMES),
        },
        "Actions": {"#Bios.ResetBios": {"target": f"{base}/Actions/Bios.ResetBios"}},
    }


def bios_settings_body(node: NodeState) -> dict:
    return {
        "@odata.type": odata_type("Bios"),
        "@odata.id": f"{_bios_path(node)}/Settings",
        "Id": "Settings",
        "Name": "BIOS Configuration Pending Settings",
        "AttributeRegistry": bios.ATTRIBUTE_REGISTRY,
        "Attributes": dict(node.bios_pending),
    }


def secure_boot_body(node: NodeState) -> dict:
    base = f"/redfish/v1/Systems/{node.name}/SecureBoot"
    return {
        "@odata.type": odata_type("SecureBoot"),
        "@odata.id": base,
        "Id": "SecureBoot",
        "Name": "UEFI Secure Boot",
        "SecureBootEnable": node.secure_boot_enable,
        "SecureBootCurrentBoot": "Enabled" if node.boot_secure_boot else "Disabled",
        "SecureBootMode": node.secure_boot_mode,
        "Actions": {
            "#SecureBoot.ResetKeys": {
                "target": f"{base}/Actions/SecureBoot.ResetKeys",
                "ResetKeysType@Redfish.AllowableValues": list(RESET_KEYS),
            }
        },
    }


@node_scoped
async def get_bios(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(bios_body(node))


@node_scoped
async def get_bios_settings(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(bios_settings_body(node))


def _attribute_errors(attributes: object) -> list[RedfishError]:
    if not isinstance(attributes, dict):
        return [
            RedfishError(
                400,
                "PropertyValueTypeError",
                "The value for Attributes must be an object.",
                json.dumps(attributes),
                "Attributes",
            )
        ]
    errors = []
    for name, value in attributes.items():
        where = f"Attributes/{name}"
        allowed = bios.ATTRIBUTES.get(name)
        if allowed is None:
            errors.append(
                RedfishError(
                    400, "PropertyUnknown", f"The property {where} is not in the list of valid properties.", where
                )
            )
        elif not isinstance(value, str):
            errors.append(
                RedfishError(
                    400,
                    "PropertyValueTypeError",
                    f"The value {json.dumps(value)} for the property {where} is not a type that the property can "
                    "accept: it takes a string.",
                    json.dumps(value),
                    where,
                )
            )
        elif value not in allowed:
            errors.append(
                RedfishError(
                    400,
                    "PropertyValueNotInList",
                    f"The value {value!r} for {where} is not in the list of acceptable values ({', '.join(allowed)}).",
                    json.dumps(value),
                    where,
                )
            )
    return errors


@node_scoped
async def patch_bios_settings(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    """Attributes to apply at the next boot, added to those already pending. sushy's (and Ironic's)
    "@Redfish.SettingsApplyTime" {"ApplyTime": "OnReset"} is accepted: it is what happens anyway."""
    body = await read_json(request)
    apply_time = body.pop("@Redfish.SettingsApplyTime", None)
    errors = check_writes(body, bios_settings_body(node), {"Attributes": None})
    if "Attributes" in body:
        errors += _attribute_errors(body["Attributes"])
    if apply_time is not None and (not isinstance(apply_time, dict) or apply_time.get("ApplyTime") not in APPLY_TIMES):
        errors.append(
            RedfishError(
                400,
                "PropertyValueNotInList",
                "The value for @Redfish.SettingsApplyTime/ApplyTime is not in the list of acceptable values "
                f"({', '.join(APPLY_TIMES)}).",
                json.dumps(apply_time),
                "@Redfish.SettingsApplyTime/ApplyTime",
            )
        )
    reject(errors)
    node.bios_pending = {**node.bios_pending, **body.get("Attributes", {})}
    sim.fleet.touch(node)
    return reply(bios_settings_body(node))


@node_scoped
async def reset_bios(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    """Bios.ResetBios: the factory defaults are pending, for the next boot to take up."""
    await read_json(request, empty_ok=True)
    node.bios_pending = dict(bios.DEFAULTS)
    sim.fleet.touch(node)
    return no_content()


@node_scoped
async def get_secure_boot(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    return reply(secure_boot_body(node))


@node_scoped
async def patch_secure_boot(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = await read_json(request)
    errors = check_writes(body, secure_boot_body(node), {"SecureBootEnable": None})
    enable = body.get("SecureBootEnable", node.secure_boot_enable)
    if not isinstance(enable, bool):
        errors.append(
            RedfishError(
                400,
                "PropertyValueTypeError",
                f"The value {json.dumps(enable)} for the property SecureBootEnable is not a type that the property "
                "can accept: it takes true or false.",
                json.dumps(enable),
                "SecureBootEnable",
            )
        )
    reject(errors)
    node.secure_boot_enable = enable
    sim.fleet.touch(node)
    return reply(secure_boot_body(node))


@node_scoped
async def reset_keys(request: web.Request, sim: Simulator, node: NodeState) -> web.Response:
    body = await read_json(request)
    if "ResetKeysType" not in body:
        raise RedfishError(
            400,
            "ActionParameterMissing",
            f"The action {RESET_KEYS_ACTION} requires the parameter ResetKeysType.",
            RESET_KEYS_ACTION,
            "ResetKeysType",
        )
    reset_type = body["ResetKeysType"]
    if not isinstance(reset_type, str) or reset_type not in RESET_KEYS:
        raise RedfishError(
            400,
            "ActionParameterValueNotInList",
            f"The value {json.dumps(reset_type)} for the parameter ResetKeysType in the action {RESET_KEYS_ACTION} "
            "is not in the list of acceptable values.",
            json.dumps(reset_type),
            "ResetKeysType",
            RESET_KEYS_ACTION,
        )
    node.secure_boot_mode = RESET_KEYS[reset_type]
    sim.fleet.touch(node)
    return no_content()


ROUTES = [
    ("GET", "/redfish/v1/Systems/{node}/Bios", get_bios),
    ("POST", "/redfish/v1/Systems/{node}/Bios/Actions/Bios.ResetBios", reset_bios),
    ("GET", "/redfish/v1/Systems/{node}/Bios/Settings", get_bios_settings),
    ("PATCH", "/redfish/v1/Systems/{node}/Bios/Settings", patch_bios_settings),
    ("GET", "/redfish/v1/Systems/{node}/SecureBoot", get_secure_boot),
    ("PATCH", "/redfish/v1/Systems/{node}/SecureBoot", patch_secure_boot),
    ("POST", "/redfish/v1/Systems/{node}/SecureBoot/Actions/SecureBoot.ResetKeys", reset_keys),
]
