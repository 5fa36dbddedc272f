"""The ISO 9660 image of a NoCloud config drive: a volume labelled CIDATA, each file under its
Rock Ridge and Joliet name (so Linux and cloud-init see the names as written) beside an ISO 9660
level-1 one. workflows/config_drive.py writes cloud-init's files, fleet/agent_credentials.py the agent's.
"""

from __future__ import annotations

import io

import pycdlib

VOLUME_LABEL = "CIDATA"
LEVEL_1_NAMES = {
    "meta-data": "/METADATA.;1",
    "user-data": "/USERDATA.;1",
    "network-config": "/NETWORK.;1",
    "gpu-agent.json": "/GPUAGENT.JSN;1",
}


def iso(files: dict[str, str]) -> bytes:
    """The drive holding `files` (name -> text), each a name of LEVEL_1_NAMES."""
    image = pycdlib.PyCdlib()
    image.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_LABEL)
    for name, text in files.items():
        content = text.encode()
        image.add_fp(io.BytesIO(content), len(content), LEVEL_1_NAMES[name], rr_name=name, joliet_path=f"/{name}")
    out = io.BytesIO()
    image.write_fp(out)
    image.close()
    return out.getvalue()
