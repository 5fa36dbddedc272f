"""gpu-agent: the program that runs on each GPU server and answers the control plane.

It serves one node's metrics (dcgm-exporter's names plus its own XID counter and health
gauge), attestation evidence bound to a verifier's nonce, in-band inventory, and the GPU
memory wipe, GPU reset and diagnostics the workflows ask for. Every request carries the
node's bearer token. With --xid-report-url it also reports each new XID to the control plane
as soon as it sees it, with that token (xid_reports.py).

What it reads comes from a backend chosen at start (agent/backend.py says what a backend
provides): `host` reads a real Linux server (NVML, the kernel log, the TPM through tpm2-tools,
/sys/block); `sim` reads bmcsim's simulated hardware, and bmcsim serves every simulated node
through this same code. The package imports nothing of the control plane or of bmcsim.
"""
