"""The names of the node workflows' steps, as `Node.step` and the audit log store them.

A name outlives the code that runs it: a paused workflow resumes at the step its node names, and
the console reads a node's story back from the names in its audit rows. So each is written down
here, once, rather than taken from a function's name, and a renamed function keeps its step.
"""

import enum


class StepName(enum.StrEnum):
    # booting, shared by inspection and wiping (a wipe no longer ends with eject_media,
    # clear_boot_override and power_off: a node stored at one of those starts its wipe over)
    BOOT_SERVICE_IMAGE = "boot_service_image"
    WAIT_FOR_AGENT = "wait_for_agent"
    # inspection
    CHECK_FIRMWARE = "check_firmware"
    FINISH_FIRMWARE_UPDATE = "finish_firmware_update"
    RECHECK_FIRMWARE = "recheck_firmware"
    CHECK_INVENTORY = "check_inventory"
    START_DIAGNOSTICS = "start_diagnostics"
    WAIT_FOR_DIAGNOSTICS = "wait_for_diagnostics"
    ATTEST = "attest"
    # provisioning
    STOP_IDLE_DIAGNOSTICS = "stop_idle_diagnostics"
    ERASE_DRIVES_IF_REINSTALLING = "erase_drives_if_reinstalling"
    PREPARE_CONFIG_DRIVE = "prepare_config_drive"
    ENABLE_SECURE_BOOT_FOR_IMAGE = "enable_secure_boot_for_image"
    BOOT_TENANT_IMAGE = "boot_tenant_image"
    CHECK_SECURE_BOOT_FOR_IMAGE = "check_secure_boot_for_image"
    CHECK_BOOTED_IMAGE = "check_booted_image"
    JOIN_TENANT_NETWORKS = "join_tenant_networks"
    WAIT_FOR_TENANT_NETWORKS = "wait_for_tenant_networks"
    SIGN_HANDOFF = "sign_handoff"
    # wiping
    LEAVE_TENANT_NETWORKS = "leave_tenant_networks"
    JOIN_PROVISIONING_NETWORK = "join_provisioning_network"
    START_GPU_WIPE = "start_gpu_wipe"
    WAIT_FOR_GPU_WIPE = "wait_for_gpu_wipe"
    START_DRIVE_ERASE = "start_drive_erase"
    WAIT_FOR_DRIVE_ERASE = "wait_for_drive_erase"
    CLEAR_CONSOLE_LOG = "clear_console_log"
