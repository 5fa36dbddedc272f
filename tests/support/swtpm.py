"""A real TPM 2.0 for tests: swtpm in socket mode, driven by tpm2-tools.

Needs the Debian packages swtpm, swtpm-tools and tpm2-tools; without them a test that starts
one fails, it never skips. There is no resource manager between tpm2-tools and swtpm, so every
command `run` gives is followed by flushing the transient objects (and sessions) it left loaded.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.support.ports import free_port_pair

TOOLS = (
    "swtpm", "tpm2_createek", "tpm2_createak", "tpm2_evictcontrol", "tpm2_getcap", "tpm2_flushcontext",
    "tpm2_pcrreset", "tpm2_pcrextend", "tpm2_pcrread", "tpm2_quote", "tpm2_eventlog",
)  # fmt: skip


class SoftwareTPM:
    def __init__(self, directory: Path):
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        assert not missing, f"install the Debian packages swtpm, swtpm-tools and tpm2-tools (missing {missing})"
        self.directory = directory
        self.port = free_port_pair()
        state = directory / "state"
        state.mkdir()
        self.process = subprocess.Popen(
            [
                "swtpm", "socket", "--tpm2",
                "--tpmstate", f"dir={state}",
                "--server", f"type=tcp,port={self.port},bindaddr=127.0.0.1",
                "--ctrl", f"type=tcp,port={self.port + 1},bindaddr=127.0.0.1",
                "--flags", "not-need-init,startup-clear",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        assert self.process.stderr is not None  # piped above
        self.errors = self.process.stderr
        self.tcti = f"swtpm:host=127.0.0.1,port={self.port}"
        self.env = {**os.environ, "TPM2TOOLS_TCTI": self.tcti}
        deadline = time.monotonic() + 10
        while True:
            assert self.process.poll() is None, f"swtpm exited: {self.errors.read().decode()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "swtpm did not listen within 10 s"
                time.sleep(0.05)

    def run(self, *command: str) -> str:
        result = subprocess.run(command, cwd=self.directory, env=self.env, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"{' '.join(command)}: {result.stderr}"
        for handles in ("-t", "-s"):  # no resource manager: free what the command left loaded
            subprocess.run(["tpm2_flushcontext", handles], env=self.env, capture_output=True, timeout=30, check=True)
        return result.stdout

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.errors.close()
