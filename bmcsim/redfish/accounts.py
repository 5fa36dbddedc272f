"""SessionService (X-Auth-Token sessions) and AccountService (the operator and the per-BMC admin)."""

from __future__ import annotations

from aiohttp import web

from ..auth import OPERATOR
from ..sim import SIM
from .errors import RedfishError, no_content, not_found, read_json, reply
from .schema import OK, collection, odata_type, ref


def session_service_body(timeout_s: int) -> dict:
    return {
        "@odata.type": odata_type("SessionService"),
        "@odata.id": "/redfish/v1/SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": True,
        "SessionTimeout": timeout_s,
        "Status": OK,
        "Sessions": ref("/redfish/v1/SessionService/Sessions"),
    }


def session_body(session_id: str, username: str) -> dict:
    return {
        "@odata.type": odata_type("Session"),
        "@odata.id": f"/redfish/v1/SessionService/Sessions/{session_id}",
        "Id": session_id,
        "Name": f"Session of {username}",
        "UserName": username,
        "Password": None,
    }


def account_service_body() -> dict:
    return {
        "@odata.type": odata_type("AccountService"),
        "@odata.id": "/redfish/v1/AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": True,
        "MinPasswordLength": 6,
        "Status": OK,
        "Accounts": ref("/redfish/v1/AccountService/Accounts"),
        "Roles": ref("/redfish/v1/AccountService/Roles"),
    }


def account_body(account_id: str, username: str) -> dict:
    return {
        "@odata.type": odata_type("ManagerAccount"),
        "@odata.id": f"/redfish/v1/AccountService/Accounts/{account_id}",
        "Id": account_id,
        "Name": f"Account {username}",
        "UserName": username,
        "Password": None,
        "RoleId": "Administrator",
        "Enabled": True,
        "Locked": False,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": ref("/redfish/v1/AccountService/Roles/Administrator")},
    }


def role_body() -> dict:
    return {
        "@odata.type": odata_type("Role"),
        "@odata.id": "/redfish/v1/AccountService/Roles/Administrator",
        "Id": "Administrator",
        "Name": "Administrator",
        "RoleId": "Administrator",
        "IsPredefined": True,
        "AssignedPrivileges": ["Login", "ConfigureManager", "ConfigureUsers", "ConfigureSelf", "ConfigureComponents"],
    }


async def get_session_service(request: web.Request) -> web.Response:
    return reply(session_service_body(60 * 30))


async def get_sessions(request: web.Request) -> web.Response:
    principal = request["principal"]
    members = [
        f"/redfish/v1/SessionService/Sessions/{s.id}"
        for s in request.app[SIM].auth.sessions.values()
        if principal in (OPERATOR, s.principal)
    ]
    return reply(collection("SessionCollection", "/redfish/v1/SessionService/Sessions", "Session Collection", members))


async def create_session(request: web.Request) -> web.Response:
    body = await read_json(request)
    username, password = body.get("UserName"), body.get("Password")
    if not isinstance(username, str) or not isinstance(password, str):
        raise RedfishError(400, "PropertyMissing", "UserName and Password are required strings.", "UserName")
    session = request.app[SIM].auth.login(username, password)
    if session is None:
        raise RedfishError(401, "NoValidSession", "The user name or password is not valid.")
    path = f"/redfish/v1/SessionService/Sessions/{session.id}"
    return reply(
        session_body(session.id, username), status=201, headers={"X-Auth-Token": session.token, "Location": path}
    )


def _session(request: web.Request):
    session = request.app[SIM].auth.sessions.get(request.match_info["session"])
    if session is None or request["principal"] not in (OPERATOR, session.principal):
        raise not_found(request.path)
    return session


async def get_session(request: web.Request) -> web.Response:
    session = _session(request)
    return reply(session_body(session.id, session.username))


async def delete_session(request: web.Request) -> web.Response:
    request.app[SIM].auth.logout(_session(request).id)
    return no_content()


async def get_account_service(request: web.Request) -> web.Response:
    return reply(account_service_body())


def _accounts(request: web.Request) -> dict[str, str]:
    """The operator account and the per-BMC `admin` account."""
    return {"1": request.app[SIM].settings.username, "2": "admin"}


async def get_accounts(request: web.Request) -> web.Response:
    members = [f"/redfish/v1/AccountService/Accounts/{i}" for i in _accounts(request)]
    return reply(collection("ManagerAccountCollection", "/redfish/v1/AccountService/Accounts", "Accounts", members))


async def get_account(request: web.Request) -> web.Response:
    account_id = request.match_info["account"]
    username = _accounts(request).get(account_id)
    if username is None:
        raise not_found(request.path)
    return reply(account_body(account_id, username))


async def get_roles(request: web.Request) -> web.Response:
    members = ["/redfish/v1/AccountService/Roles/Administrator"]
    return reply(collection("RoleCollection", "/redfish/v1/AccountService/Roles", "Roles", members))


async def get_role(request: web.Request) -> web.Response:
    return reply(role_body())


ROUTES = [
    ("GET", "/redfish/v1/SessionService", get_session_service),
    ("GET", "/redfish/v1/SessionService/Sessions", get_sessions),
    ("POST", "/redfish/v1/SessionService/Sessions", create_session),
    ("GET", "/redfish/v1/SessionService/Sessions/{session}", get_session),
    ("DELETE", "/redfish/v1/SessionService/Sessions/{session}", delete_session),
    ("GET", "/redfish/v1/AccountService", get_account_service),
    ("GET", "/redfish/v1/AccountService/Accounts", get_accounts),
    ("GET", "/redfish/v1/AccountService/Accounts/{account}", get_account),
    ("GET", "/redfish/v1/AccountService/Roles", get_roles),
    ("GET", "/redfish/v1/AccountService/Roles/Administrator", get_role),
]
