"""The control plane's settings for what it drives besides the BMCs: the fabrics' switches and their
managers (bmcsim stands in for all of them in the demo). Imported whole by gpufleet/settings.py."""

from gpufleet import environment

BMCSIM_URL = environment.text("BMCSIM_URL", "http://127.0.0.1:8100")

# The fabric's switches (workflows/fabric_health.py): their health is read every FABRIC_POLL_SECONDS
# from the Redfish service that manages them. The demo's is bmcsim, with its fleet-wide operator
# credential; a real fabric's (a switch manager such as UFM) is given with its own, and its address
# must be in BMC_NETWORKS, as the BMCs' are.
FABRIC_REDFISH_URL = environment.text("GPUFLEET_FABRIC_REDFISH_URL", BMCSIM_URL)
FABRIC_REDFISH_USERNAME = environment.text("GPUFLEET_FABRIC_REDFISH_USERNAME", "root")
DEVELOPMENT_FABRIC_PASSWORD = "calvin"  # bmcsim's; `check --deploy` warns while it is the one set
FABRIC_REDFISH_PASSWORD = environment.text("GPUFLEET_FABRIC_REDFISH_PASSWORD", DEVELOPMENT_FABRIC_PASSWORD)
FABRIC_POLL_SECONDS = environment.number("GPUFLEET_FABRIC_POLL_SECONDS", 15, positive=True)
# Placement keeps off a cut-off node at once; the reservation it serves loses it (and it is wiped)
# only once its switch's trouble has lasted this long, so that a link that flaps once costs no node.
FABRIC_LET_GO_AFTER_SECONDS = environment.number("GPUFLEET_FABRIC_LET_GO_AFTER_SECONDS", 60)
# Tenants' networks (workflows/fabric_sync.py): each fabric's manager, reached through a URL
# template per manager ({switch}: a leaf switch's NVUE; {fabric}: an InfiniBand fabric's UFM, one a
# pod; {domain}: an NVLink domain's NMX-M, one a rack), with its credential, on these networks only.
# The demo's are bmcsim's, which `check --deploy` refuses. A node on no tenant's network is on the
# provisioning VLAN. Every FABRIC_SYNC_SECONDS every attachment is read back, for drift.
FABRIC_MANAGER_DEFAULT_URLS = {
    "ethernet": f"{BMCSIM_URL}/switches/{{switch}}",
    "infiniband": f"{BMCSIM_URL}/pods/{{fabric}}",
    "nvlink": f"{BMCSIM_URL}/nvlink-domains/{{domain}}",
}
ETHERNET_MANAGER_URL = environment.text("GPUFLEET_ETHERNET_MANAGER_URL", FABRIC_MANAGER_DEFAULT_URLS["ethernet"])
INFINIBAND_MANAGER_URL = environment.text("GPUFLEET_INFINIBAND_MANAGER_URL", FABRIC_MANAGER_DEFAULT_URLS["infiniband"])
NVLINK_MANAGER_URL = environment.text("GPUFLEET_NVLINK_MANAGER_URL", FABRIC_MANAGER_DEFAULT_URLS["nvlink"])
ETHERNET_MANAGER_USERNAME = environment.text("GPUFLEET_ETHERNET_MANAGER_USERNAME", FABRIC_REDFISH_USERNAME)
ETHERNET_MANAGER_PASSWORD = environment.text("GPUFLEET_ETHERNET_MANAGER_PASSWORD", FABRIC_REDFISH_PASSWORD)
INFINIBAND_MANAGER_USERNAME = environment.text("GPUFLEET_INFINIBAND_MANAGER_USERNAME", FABRIC_REDFISH_USERNAME)
INFINIBAND_MANAGER_PASSWORD = environment.text("GPUFLEET_INFINIBAND_MANAGER_PASSWORD", FABRIC_REDFISH_PASSWORD)
NVLINK_MANAGER_USERNAME = environment.text("GPUFLEET_NVLINK_MANAGER_USERNAME", FABRIC_REDFISH_USERNAME)
NVLINK_MANAGER_PASSWORD = environment.text("GPUFLEET_NVLINK_MANAGER_PASSWORD", FABRIC_REDFISH_PASSWORD)
FABRIC_MANAGER_NETWORKS = environment.networks(
    "GPUFLEET_FABRIC_MANAGER_NETWORKS", "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"
)
FABRIC_SYNC_SECONDS = environment.number("GPUFLEET_FABRIC_SYNC_SECONDS", 30, positive=True)
