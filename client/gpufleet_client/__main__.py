"""`python -m gpufleet_client`: the same as the `gpufleet` command."""

import sys

from gpufleet_client.cli import main

sys.exit(main())
