"""`gpu-agent` (agent.cli.main, as `python -m agent` runs it) on a stand-in GPU server: the fake
libnvidia-ml of tests/support/fake_nvml.py, an H100 and a V100, in place of NVML. Its kernel log
is whatever file --kmsg names, which the test appends XID records to.

    python -m tests.agent.fake_gpu_server CALLS_FILE [gpu-agent options]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pynvml

from agent.cli import main
from tests.support.fake_nvml import FakeLibrary, h100, v100

if __name__ == "__main__":
    library = FakeLibrary([h100(), v100()], Path(sys.argv[1]))
    for name in dir(FakeLibrary):
        if name.startswith("nvml"):
            setattr(pynvml, name, getattr(library, name))
    main(["--backend", "host", *sys.argv[2:]])
