"""What the tests, the soak and the benchmarks share, and nothing else: free ports (ports), child
processes and their starters (processes), bmcsim (bmcsim), the whole control plane (stack), the
fleets, tenants and incidents tests build (factories), and the tenants' API called in process
(api). Fixtures stay in the conftest.py files.

Import a module, not this package: each one imports only what it needs, so the soak can take a
free port before Django is set up."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
