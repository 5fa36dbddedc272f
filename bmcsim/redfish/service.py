"""The service document: /redfish, the ServiceRoot, $metadata and the OData service document."""

from __future__ import annotations

from aiohttp import web

from .errors import ODATA_HEADERS, reply
from .expand import MAX_LEVELS
from .schema import COLLECTIONS, EXTRA_NAMESPACES, MANUFACTURER, REDFISH_VERSION, SERVICE_UUID, TYPES, odata_type, ref


def metadata_xml() -> str:
    """$metadata: the schema namespaces this service uses."""
    versions = {name: (version,) for name, version in TYPES.items()} | EXTRA_NAMESPACES
    refs = [
        f'  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{name}_v1.xml">\n'
        f'    <edmx:Include Namespace="{name}"/>\n'
        + "".join(f'    <edmx:Include Namespace="{name}.{version}"/>\n' for version in namespaces)
        + "  </edmx:Reference>"
        for name, namespaces in versions.items()
    ]
    refs += [
        f'  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{name}_v1.xml">\n'
        f'    <edmx:Include Namespace="{name}"/>\n'
        "  </edmx:Reference>"
        for name in COLLECTIONS
    ]
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">\n'
        + "\n".join(refs)
        + '\n  <edmx:DataServices>\n    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">\n'
        '      <EntityContainer Name="Service" Extends="ServiceRoot.v1_20_0.ServiceContainer"/>\n'
        "    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n"
    )


def odata_document() -> dict:
    singletons = {
        "Service": "/redfish/v1/",
        "Systems": "/redfish/v1/Systems",
        "Chassis": "/redfish/v1/Chassis",
        "Managers": "/redfish/v1/Managers",
        "Tasks": "/redfish/v1/TaskService",
        "UpdateService": "/redfish/v1/UpdateService",
        "SessionService": "/redfish/v1/SessionService",
        "AccountService": "/redfish/v1/AccountService",
        "Fabrics": "/redfish/v1/Fabrics",
        "ComponentIntegrity": "/redfish/v1/ComponentIntegrity",
    }
    return {
        "@odata.context": "/redfish/v1/$metadata",
        "value": [{"name": n, "kind": "Singleton", "url": u} for n, u in singletons.items()],
    }


def service_root() -> dict:
    return {
        "@odata.type": odata_type("ServiceRoot"),
        "@odata.id": "/redfish/v1/",
        "Id": "RootService",
        "Name": "bmcsim Root Service",
        "RedfishVersion": REDFISH_VERSION,
        "UUID": SERVICE_UUID,
        "Vendor": MANUFACTURER,
        "Product": "bmcsim simulated GPU fleet",
        "ProtocolFeaturesSupported": {
            "ExpandQuery": {"ExpandAll": True, "Levels": True, "Links": True, "NoLinks": True, "MaxLevels": MAX_LEVELS},
            "SelectQuery": False,
            "FilterQuery": False,
            "OnlyMemberQuery": False,
            "ExcerptQuery": False,
        },
        "Systems": ref("/redfish/v1/Systems"),
        "Chassis": ref("/redfish/v1/Chassis"),
        "Managers": ref("/redfish/v1/Managers"),
        "Tasks": ref("/redfish/v1/TaskService"),
        "UpdateService": ref("/redfish/v1/UpdateService"),
        "SessionService": ref("/redfish/v1/SessionService"),
        "AccountService": ref("/redfish/v1/AccountService"),
        "Fabrics": ref("/redfish/v1/Fabrics"),
        "ComponentIntegrity": ref("/redfish/v1/ComponentIntegrity"),
        "Links": {"Sessions": ref("/redfish/v1/SessionService/Sessions")},
    }


async def get_versions(request: web.Request) -> web.Response:
    return reply({"v1": "/redfish/v1/"})


async def get_root(request: web.Request) -> web.Response:
    return reply(service_root())


async def get_metadata(request: web.Request) -> web.Response:
    return web.Response(text=metadata_xml(), content_type="application/xml", headers=ODATA_HEADERS)


async def get_odata(request: web.Request) -> web.Response:
    return reply(odata_document())


ROUTES = [
    ("GET", "/redfish", get_versions),
    ("GET", "/redfish/v1", get_root),
    ("GET", "/redfish/v1/$metadata", get_metadata),
    ("GET", "/redfish/v1/odata", get_odata),
]
