"""bmcsim: the simulated GPU fleet.

One process serves a Redfish service with every node as a System (power, boot override,
virtual media, drives with secure erase, tasks), the in-band agent of every node (metrics,
attestation evidence, GPU memory wipe) and an admin API to read the inventory and inject
faults. Its state lives under a data directory and survives a restart.
"""
