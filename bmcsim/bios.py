"""The BIOS settings of a node: its attribute registry (names, allowed values, factory defaults).

Names are those real vendors' registries use (Dell's, whose `BootMode`, `ProcVirtualization`,
`LogicalProc`, `ProcTurboMode`, `SriovGlobalEnable`, `MmioAbove4Gb` and `TpmSecurity` also appear
in DMTF's public-rackmount1 mockup or its registry), with `IommuSupport` and `PcieAriSupport` for
what a GPU server needs on: the IOMMU and PCIe ARI for SR-IOV virtual functions. Every value is a
string from a fixed list, as an enumeration attribute of an AttributeRegistry is.
"""

from __future__ import annotations

ATTRIBUTE_REGISTRY = "BiosAttributeRegistryGF.v1_0_0"
ENABLED = ("Enabled", "Disabled")

# name -> allowed values; the first is the factory default.
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "BootMode": ("Uefi", "Bios"),
    "ProcVirtualization": ENABLED,
    "LogicalProc": ENABLED,
    "ProcTurboMode": ENABLED,
    "SriovGlobalEnable": ENABLED,
    "IommuSupport": ENABLED,
    "MmioAbove4Gb": ENABLED,
    "PcieAriSupport": ENABLED,
    "TpmSecurity": ("On", "Off"),
}
DEFAULTS: dict[str, str] = {name: values[0] for name, values in ATTRIBUTES.items()}
# What `bios_tamper` changes when it is not told: SR-IOV off, as a tampering that quietly breaks
# the GPUs' virtual functions would.
TAMPER_DEFAULT_ATTRIBUTE = "SriovGlobalEnable"


def other_value(name: str, value: str) -> str:
    """The first allowed value of `name` that is not `value` (what a tamper turns it to)."""
    return next(v for v in ATTRIBUTES[name] if v != value)
