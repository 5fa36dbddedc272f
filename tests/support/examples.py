"""How many examples a property test draws: all it asks for in `make test`; in `make check`'s
inner loop a share of them (GPUFLEET_TEST_EXAMPLES_PERCENT, which `make check` sets to 10), so
the loop still runs every property, on fewer inputs, and `make test` runs them in volume."""

from __future__ import annotations

import os

FEWEST = 10  # below this a property is hardly tried

PERCENT = int(os.environ.get("GPUFLEET_TEST_EXAMPLES_PERCENT", "100"))


def examples(asked: int) -> int:
    """`asked` in a full run; its share in the inner loop, never fewer than FEWEST (nor than asked)."""
    return min(asked, max(FEWEST, asked * PERCENT // 100))
