"""Where an RDMA port sits: its netdev(s), PCI function, NUMA node and nearby GPUs.

Everything comes from sysfs symlinks under an injectable root, so fixture trees
with relative links behave like the real thing. GPU locality follows the
levels ``nvidia-smi topo -m`` uses, coarsened to what sysfs can tell:

``pcie_switch``  the NIC and the GPU share a PCIe bridge below the root port (PIX/PXB)
``host_bridge``  same PCI host bridge, different root ports (PHB)
``numa_node``    same NUMA node, different host bridges (NODE)
``system``       across NUMA nodes (SYS)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ._sysfs import INFINIBAND, read_text

_BDF = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA / 3D controller; NVSwitch (0x0680) is not a GPU

LOCALITIES = ("pcie_switch", "host_bridge", "numa_node", "system")


@dataclass(frozen=True, slots=True)
class PciFunction:
    """A PCI function and its place in the PCI tree.

    Attributes:
        address: ``0000:3b:00.0`` as sysfs names it.
        chain: the path below ``/sys/devices``: host bridge (``pci0000:3a``),
            then every bridge, ending with the function itself.
        numa_node: NUMA node, -1 when the platform does not say.
    """

    address: str
    chain: tuple[str, ...]
    numa_node: int


@dataclass(frozen=True, slots=True)
class PortPlace:
    """Topology of one RDMA port.

    Attributes:
        netdev: the netdev of the RDMA port (a bond for RoCE LAG), ``""`` if none.
        members: netdevs that carry driver statistics: the bond's lower devices,
            else the netdev itself, else nothing.
        pci: the RDMA device's PCI function, None when sysfs has no link.
    """

    device: str
    port: str
    netdev: str
    members: tuple[str, ...]
    pci: PciFunction | None

    @property
    def pci_address(self) -> str:
        """The PCI address or ``""``."""
        return self.pci.address if self.pci else ""

    @property
    def numa_node(self) -> int:
        """The NUMA node or -1."""
        return self.pci.numa_node if self.pci else -1


def nvml_bus_id(address: str) -> str:
    """``0000:3b:00.0`` -> ``00000000:3B:00.0`` (NVML ``pciInfo.busId`` spelling)."""
    m = _BDF.match(address)
    if not m:
        return address
    dom, bus, dev, fn = m.groups()
    return f"{int(dom, 16):08X}:{bus.upper()}:{dev.upper()}.{fn}"


def pci_function(sys_root: Path, link: Path) -> PciFunction | None:
    """Resolve a sysfs ``device`` link (or a ``bus/pci/devices`` entry) to its PCI function."""
    try:
        real = Path(os.path.realpath(link, strict=True))
        devices = Path(os.path.realpath(sys_root / "devices"))
        chain = real.relative_to(devices).parts
    except (OSError, ValueError):
        return None
    if not chain or not _BDF.match(chain[-1]):
        return None
    numa = -1
    text = read_text(real / "numa_node")
    if text is not None:
        try:
            numa = int(text)
        except ValueError:
            numa = -1
    return PciFunction(chain[-1], tuple(chain), numa)


def port_netdev(port_path: Path) -> str:
    """The netdev behind an RDMA port, from ``gid_attrs/ndevs/<index>``.

    Unused GID entries fail to read on real hardware; the first readable,
    non-empty entry wins.
    """
    ndevs = port_path / "gid_attrs" / "ndevs"
    try:
        entries = sorted((e.name for e in ndevs.iterdir() if e.name.isdigit()), key=int)
    except OSError:
        return ""
    for entry in entries[:16]:
        name = read_text(ndevs / entry)
        if name:
            return name
    return ""


def lower_devices(sys_root: Path, netdev: str) -> tuple[str, ...]:
    """A bond's (or team's) lower devices, from ``lower_*`` links or ``bonding/slaves``."""
    base = sys_root / "class" / "net" / netdev
    try:
        lowers = sorted(
            e.name[len("lower_") :] for e in base.iterdir() if e.name.startswith("lower_")
        )
    except OSError:
        return ()
    if lowers:
        return tuple(lowers)
    slaves = read_text(base / "bonding" / "slaves")
    return tuple(slaves.split()) if slaves else ()


def device_netdevs(sys_root: Path, device: str) -> tuple[str, ...]:
    """Netdevs of the RDMA device's PCI function (``device/net/*``), for ports without GIDs."""
    try:
        net = sys_root.joinpath(*INFINIBAND, device, "device", "net")
        return tuple(sorted(e.name for e in net.iterdir()))
    except OSError:
        return ()


def netdev_speed_bps(sys_root: Path, netdev: str) -> float | None:
    """Link speed of a netdev in bits per second; None when down or unknown."""
    text = read_text(sys_root / "class" / "net" / netdev / "speed")
    try:
        mbps = int(text) if text else -1
    except ValueError:
        return None
    return mbps * 1e6 if mbps > 0 else None


def place_port(sys_root: Path, device: str, port: str, port_path: Path) -> PortPlace:
    """Work out one port's netdev, bond members and PCI function."""
    netdev = port_netdev(port_path)
    if not netdev:
        candidates = device_netdevs(sys_root, device)
        if len(candidates) == 1 or (candidates and port.isdigit() and int(port) <= len(candidates)):
            netdev = candidates[0] if len(candidates) == 1 else candidates[int(port) - 1]
    members: tuple[str, ...] = ()
    if netdev:
        members = lower_devices(sys_root, netdev) or (netdev,)
    pci = pci_function(sys_root, sys_root.joinpath(*INFINIBAND, device, "device"))
    return PortPlace(device, port, netdev, members, pci)


def find_gpus(sys_root: Path) -> list[PciFunction]:
    """NVIDIA GPUs on the PCI bus (vendor 0x10de, display/3D class)."""
    base = sys_root / "bus" / "pci" / "devices"
    try:
        entries = sorted(e.name for e in base.iterdir())
    except OSError:
        return []
    gpus: list[PciFunction] = []
    for entry in entries:
        if read_text(base / entry / "vendor") != NVIDIA_VENDOR:
            continue
        cls = read_text(base / entry / "class") or ""
        if not cls.startswith(_GPU_CLASSES):
            continue
        fn = pci_function(sys_root, base / entry)
        if fn is not None:
            gpus.append(fn)
    return gpus


def locality(nic: PciFunction, gpu: PciFunction) -> str:
    """How close a NIC and a GPU are (one of :data:`LOCALITIES`)."""
    common = 0
    for a, b in zip(nic.chain[:-1], gpu.chain[:-1], strict=False):
        if a != b:
            break
        common += 1
    # chain[0] is the host bridge, chain[1] the root port: sharing anything
    # below the root port means sharing a switch.
    if common >= 2:
        return "pcie_switch"
    if common == 1:
        return "host_bridge"
    if nic.numa_node == gpu.numa_node:
        return "numa_node"
    return "system"
