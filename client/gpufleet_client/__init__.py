"""gpufleet-client: the tenants' command-line client of gpu-fleet (`gpufleet`, in cli.py)."""

__version__ = "0.1.0"
