"""Provisioning's steps: idle diagnostics stopped, drives erased for a reinstall, the tenant's
config drive and image booted, and what booted checked.
"""

from __future__ import annotations

from ipaddress import ip_interface, ip_network

from django.conf import settings

from fleet import firmware, selectors, services
from fleet.lifecycle import Event, State
from fleet.models import AuditEvent, Node
from fleet.services import network_attachments, tenant_networks
from reservations.models import Reservation
from reservations.services.networks import say_why_networks_wait
from workflows import fabric_sync, idle_diagnostics
from workflows.agent import AgentError
from workflows.config_drive import NoCloudConfig
from workflows.node_workflows.booting import boot_image, power_off
from workflows.node_workflows.run import NotYet, Run, StepFailed
from workflows.node_workflows.wiping import start_drive_erase, wait_for_fabrics


def _reinstalling(node: Node) -> bool:
    """Whether the node's current provisioning is a tenant's reinstall."""
    entered = (
        AuditEvent.objects.filter(node_id=node.pk, to_state=State.PROVISIONING)
        .exclude(from_state=State.PROVISIONING)
        .latest("id")
    )
    return entered.event == Event.REINSTALL_REQUESTED


def stop_idle_diagnostics(run: Run) -> None:
    """Placement wants the node: first of all, stop the diagnostics it was running while idle
    (workflows/idle_diagnostics.py), so that the reservation waits on nothing."""
    idle = selectors.running_idle_diagnostics(node_id=run.node.pk)
    if idle is not None:
        idle_diagnostics.preempt(idle, run.agent, why="placement wants the node")


def erase_drives_if_reinstalling(run: Run) -> dict:
    """A reinstall erases the node's drives first, powered off: a new image on an old disk would
    keep the tenant's old data (and whatever it left there). A first provisioning has nothing to erase."""
    if not _reinstalling(run.node):
        return {"monitors": {}}
    power_off(run)
    return start_drive_erase(run)


def _tenant_image(node: Node):
    """What the node boots for its tenant: the image a reinstall chose, else its reservation's."""
    assert node.reservation_id is not None  # a provisioning node has one (Node.Meta)
    return node.reinstall_image or Reservation.objects.select_related("image").get(pk=node.reservation_id).image


def prepare_config_drive(run: Run) -> None:
    """The node's address on the tenant network, and its config drive: the tenant's keys and
    user data, its name and address, its private interface on the reservation's own Ethernet
    segment (the networks created where missing: fleet.services.tenant_networks), for cloud-init,
    and the tenancy's agent credentials. Both stay until the node stops serving (the drive and its
    credentials, until a reinstall). The node joins those networks at the end of provisioning."""
    assert run.node.reservation_id is not None  # a provisioning node has one (Node.Meta)
    reservation = Reservation.objects.prefetch_related("ssh_keys").get(pk=run.node.reservation_id)
    try:
        address = services.assign_address(node_id=run.node.pk)
        private = tenant_networks.ensure_tenant_networks(reservation_id=reservation.pk, node_id=run.node.pk)
    except (services.NoAddressFree, tenant_networks.NetworkPoolExhausted, tenant_networks.NetworksReleased) as full:
        raise StepFailed(str(full)) from full

    def files() -> dict[str, str]:
        interface = None
        if address:
            network = ip_network(address.pool.network)
            interface = ip_interface(f"{address.address}/{network.prefixlen}")
        return NoCloudConfig(
            # Each provisioning, a reinstall's too, is a new instance to cloud-init.
            instance_id=f"{run.node.name}-r{reservation.pk}-{run.lease.token}",
            hostname=run.node.name,
            ssh_public_keys=tuple(key.public_key for key in reservation.ssh_keys.order_by("name")),
            user_data=reservation.user_data,
            interface=interface,
            gateway=address.pool.gateway if address else None,
            mac=None,
            private_interface=private.private_interface,
        ).documents()

    try:
        services.tenancy_drive_token(node_id=run.node.pk, files=files)
    except services.NotServing as gone:
        raise StepFailed(str(gone)) from gone


def boot_tenant_image(run: Run) -> None:
    """The reservation's image in the CD, the tenancy's config drive beside it; boot the CD. The
    service image's boot ends here, and its credential with it."""
    image = _tenant_image(run.node)
    token = selectors.config_drive_token(node_id=run.node.pk)
    services.end_service_boot(node_id=run.node.pk)
    boot_image(run, image.url if image else settings.TENANT_IMAGE_URL, config_drive=token)


def enable_secure_boot_for_image(run: Run) -> None:
    """An image that needs Secure Boot gets it: SecureBootEnable set if it is off, which takes effect
    at the boot that follows. Any other image leaves Secure Boot as it is (a firmware baseline,
    checked at inspection, may require it on)."""
    image = _tenant_image(run.node)
    if image is not None and image.needs_secure_boot and not firmware.secure_boot(run.bmc.secure_boot()).enabled:
        run.bmc.enable_secure_boot()


def check_booted_image(run: Run) -> None:
    """The node booted the image the catalogue names, checksum for checksum; and its SSH host key,
    for the tenant to check on first login. A reservation without an image (an older one, or a
    fleet without a catalogue) boots GPUFLEET_TENANT_IMAGE_URL unchecked."""
    image = _tenant_image(run.node)
    try:
        inventory = run.agent.inventory()
    except AgentError as error:
        raise StepFailed(f"inventory unreadable: {error}") from error
    if inventory.get("boot_image_hashing"):
        raise NotYet("the node is still hashing the medium it booted")
    booted = inventory.get("boot_image_sha256")
    if image is not None and booted != image.sha256:
        raise StepFailed(f"booted an image with SHA-256 {booted}, not {image.name}'s {image.sha256}")
    host_keys = [k for k in inventory.get("ssh_host_keys", []) if isinstance(k, dict)]
    preferred = sorted(host_keys, key=lambda k: k.get("type") != "ssh-ed25519")
    if preferred and isinstance(fingerprint := preferred[0].get("fingerprint"), str):
        services.record_host_key(node_id=run.node.pk, fingerprint=fingerprint[:128])


def check_secure_boot_for_image(run: Run) -> None:
    """An image that needs Secure Boot was booted with Secure Boot running, as the BMC reports the
    boot (SecureBootCurrentBoot). Else provisioning fails naming why, and the reservation gets
    another node: enabled is not running when no platform key is enrolled (SecureBootMode SetupMode)."""
    image = _tenant_image(run.node)
    if image is None or not image.needs_secure_boot:
        return
    resource = run.bmc.secure_boot()
    found = firmware.secure_boot(resource)
    if found.current_boot != "Enabled":
        raise StepFailed(
            f"{image.name} needs Secure Boot, but the node booted with it {found.current_boot or 'unreported'}"
            f" (SecureBootEnable {str(found.enabled).lower()}, SecureBootMode {resource.get('SecureBootMode', '?')})"
        )


def join_tenant_networks(run: Run) -> None:
    """Put the node on its reservation's networks, last of all: the booted image has been checked,
    so no half-provisioned node is ever on a tenant's segment. A sync is sent to do it."""
    assert run.node.reservation_id is not None  # a provisioning node has one (Node.Meta)
    try:
        wanted = tenant_networks.ensure_tenant_networks(reservation_id=run.node.reservation_id, node_id=run.node.pk)
    except (tenant_networks.NetworkPoolExhausted, tenant_networks.NetworksReleased) as refused:
        raise StepFailed(str(refused)) from refused
    network_attachments.want_tenant_networks(node_id=run.node.pk, networks=wanted.networks)
    fabric_sync.request_sync()


def wait_for_tenant_networks(run: Run) -> None:
    """Wait until every membership of the node was read back from the fabrics as it should be: a
    reservation becomes active only then. A manager that refuses or is down does not fail the
    provisioning (its deadline does); meanwhile the reservation says why it waits, naming the fabric."""
    node_id = run.node.pk

    def confirmed() -> bool:
        if network_attachments.networks_confirmed(node_id=node_id):
            return True
        if problems := network_attachments.network_problems(node_id=node_id):
            assert run.node.reservation_id is not None  # a provisioning node has one (Node.Meta)
            reason = f"waiting for {run.node.name}'s networks: {'; '.join(problems)}"
            say_why_networks_wait(reservation_id=run.node.reservation_id, reason=reason[:1000])
        return False

    wait_for_fabrics(run, "every membership read back from the fabrics", confirmed)
