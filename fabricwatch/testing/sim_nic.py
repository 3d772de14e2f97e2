"""Writes sysfs-shaped trees of RDMA NICs for tests, benchmarks and the demo.

The layout follows real ConnectX hosts (``/sys/class/infiniband`` with
``counters/`` and ``hw_counters/`` per port, ``gid_attrs/ndevs``, PCI device
links with ``numa_node``, ``/sys/class/net`` with bond ``lower_*`` links); the
file *names* are the kernel's, the values are whatever the caller sets.
Counters are rewritten in place (same inode), as sysfs values change under an
open descriptor. Driver statistics go to ``ethtool -S``-format text files
that :class:`~fabricwatch.collectors.nic._ethtool.DirEthtoolSource` reads.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from fabricwatch.collectors.nic._ratios import BIT_TIMES_PER_QUANTUM, PAUSE_QUANTA_PER_FRAME

PMA_COUNTERS = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
)
"""``counters/`` of an mlx5 port (kernel ``drivers/infiniband/core/sysfs.c``)."""

Q_COUNTERS = (
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "rx_atomic_requests",
    "rx_dct_connect",
    "rx_icrc_encapsulated",
    "rx_read_requests",
    "rx_write_requests",
)
"""``hw_counters/`` of an mlx5 port without congestion-query permission."""

CONGESTION_COUNTERS = (
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "rp_cnp_handled",
    "rp_cnp_ignored",
)
"""``hw_counters/`` present only when the HCA reports ``cc_query_allowed``."""

_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
_PHYS = {2: "Polling", 3: "Disabled", 5: "LinkUp"}


def pause_frames_for(seconds: float, link_bps: float) -> int:
    """Pause frames (65535 quanta each) that keep a ``link_bps`` link paused for ``seconds``."""
    return round(seconds * link_bps / (PAUSE_QUANTA_PER_FRAME * BIT_TIMES_PER_QUANTUM))


def mlx5_ethtool_names(
    pfc_priorities: tuple[int, ...], *, storm_counters: bool = True
) -> list[str]:
    """A ConnectX-6/7-style ``ethtool -S`` name set (the parts we classify, plus bystanders)."""
    names = ["rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "link_down_events_phy"]
    names += ["rx_out_of_buffer", "rx_discards_phy", "tx_discards_phy", "rx_pause_ctrl_phy"]
    names += ["tx_pause_ctrl_phy", "rx_global_pause", "rx_global_pause_duration"]
    names += ["tx_global_pause", "tx_global_pause_duration", "rx_buffer_passed_thres_phy"]
    for p in range(8):
        names += [f"rx_prio{p}_bytes", f"rx_prio{p}_packets", f"tx_prio{p}_bytes"]
        names += [f"tx_prio{p}_packets", f"rx_prio{p}_discards"]
        if p in pfc_priorities:
            for d in ("rx", "tx"):
                names += [f"{d}_prio{p}_pause", f"{d}_prio{p}_pause_duration"]
                names += [f"{d}_prio{p}_pause_transition"]
            names += [f"rx_prio{p}_buf_discard", f"rx_prio{p}_cong_discard", f"rx_prio{p}_marked"]
    if storm_counters:
        names += ["tx_pause_storm_warning_events", "tx_pause_storm_error_events"]
    return names


@dataclass(slots=True)
class _Device:
    name: str
    pci: str
    ports: dict[str, dict[str, str]] = field(default_factory=dict)  # port -> counter -> subdir
    attrs: dict[str, dict[str, str]] = field(default_factory=dict)  # port -> attribute files
    netdevs: dict[str, str] = field(default_factory=dict)  # port -> netdev
    board: tuple[str, str, str] = ("MT_0000000838", "28.41.1000", "MT4129")


class NicFixture:
    """Builds and drives a fixture tree.

    Args:
        sys_root: the directory that plays ``/sys``.
        ethtool_dir: where ``ethtool -S`` dumps go (one file per netdev).
    """

    def __init__(self, sys_root: Path, ethtool_dir: Path) -> None:
        self.sys_root = sys_root
        self.ethtool_dir = ethtool_dir
        sys_root.mkdir(parents=True, exist_ok=True)
        ethtool_dir.mkdir(parents=True, exist_ok=True)
        self._devices: dict[str, _Device] = {}
        self._stats: dict[str, dict[str, int]] = {}
        self._root_ports: dict[int, int] = {}
        self._switches: dict[str, Path] = {}
        self._switch_ports: dict[str, int] = {}
        self._next_bus = 0x10

    # -- PCI ------------------------------------------------------------------

    def _host_bridge(self, numa: int) -> Path:
        return self.sys_root / "devices" / f"pci0000:{(max(numa, 0) * 0x80):02x}"

    def _new_root_port(self, numa: int) -> Path:
        n = self._root_ports.get(numa, 0) + 1
        self._root_ports[numa] = n
        hb = self._host_bridge(numa)
        return hb / f"0000:{hb.name[-2:]}:{n:02x}.0"

    def _parent(self, numa: int, switch: str | None) -> Path:
        if switch is None:
            return self._new_root_port(numa)
        if switch not in self._switches:
            bus = self._next_bus
            self._next_bus += 2
            self._switches[switch] = self._new_root_port(numa) / f"0000:{bus:02x}:00.0"
        up = self._switches[switch]
        k = self._switch_ports.get(switch, 0)
        self._switch_ports[switch] = k + 1
        bus = int(up.name.split(":")[1], 16) + 1
        return up / f"0000:{bus:02x}:{k:02x}.0"

    def add_pci(
        self,
        address: str,
        *,
        numa: int = 0,
        switch: str | None = None,
        vendor: str = "0x15b3",
        pci_class: str = "0x020000",
    ) -> Path:
        """A PCI function under a host bridge (per NUMA node), optionally behind a PCIe switch."""
        dev = self._parent(numa, switch) / address
        dev.mkdir(parents=True, exist_ok=True)
        _write(dev / "numa_node", str(numa))
        _write(dev / "vendor", vendor)
        _write(dev / "class", pci_class)
        link = self.sys_root / "bus" / "pci" / "devices" / address
        link.parent.mkdir(parents=True, exist_ok=True)
        _symlink(link, dev)
        return dev

    def add_gpu(self, address: str, *, numa: int = 0, switch: str | None = None) -> Path:
        """An NVIDIA 3D controller."""
        return self.add_pci(
            address, numa=numa, switch=switch, vendor="0x10de", pci_class="0x030200"
        )

    # -- netdevs --------------------------------------------------------------

    def add_netdev(self, name: str, *, pci: str | None = None, speed_mbps: int = 100_000) -> Path:
        """A ``/sys/class/net`` entry (with a ``device`` link when PCI-backed)."""
        base = self.sys_root / "class" / "net" / name
        base.mkdir(parents=True, exist_ok=True)
        _write(base / "speed", str(speed_mbps))
        _write(base / "operstate", "up")
        if pci is not None:
            _symlink(base / "device", self.sys_root / "bus" / "pci" / "devices" / pci)
        return base

    def add_bond(self, name: str, members: tuple[str, ...]) -> Path:
        """A bond over existing netdevs (``lower_*`` links and ``bonding/slaves``)."""
        base = self.sys_root / "class" / "net" / name
        (base / "bonding").mkdir(parents=True, exist_ok=True)
        for m in members:
            _symlink(base / f"lower_{m}", self.sys_root / "class" / "net" / m)
        _write(base / "bonding" / "slaves", " ".join(members))
        _write(base / "speed", "-1")
        return base

    # -- RDMA devices -----------------------------------------------------------

    def add_rdma_port(
        self,
        device: str,
        port: str = "1",
        *,
        pci: str,
        link_layer: str = "Ethernet",
        rate_gbps: int = 100,
        netdev: str | None = None,
        congestion: bool = True,
        values: dict[str, int] | None = None,
    ) -> Path:
        """An RDMA port with every ``counters/`` and ``hw_counters/`` file (congestion optional)."""
        dev = self._devices.setdefault(device, _Device(device, pci))
        base = self.sys_root / "class" / "infiniband" / device
        if not (base / "device").is_symlink():
            base.mkdir(parents=True, exist_ok=True)
            _symlink(base / "device", self.sys_root / "bus" / "pci" / "devices" / pci)
            for fname, value in zip(("board_id", "fw_ver", "hca_type"), dev.board, strict=True):
                _write(base / fname, value)
        p = base / "ports" / port
        names = dict.fromkeys(PMA_COUNTERS, "counters")
        names.update(dict.fromkeys(Q_COUNTERS, "hw_counters"))
        if congestion:
            names.update(dict.fromkeys(CONGESTION_COUNTERS, "hw_counters"))
        dev.ports[port] = names
        for sub in ("counters", "hw_counters"):
            (p / sub).mkdir(parents=True, exist_ok=True)
        for name, sub in names.items():
            _write(p / sub / name, "10" if name == "lifespan" else "0")
        _write(p / "link_layer", link_layer)
        suffix = {100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}.get(rate_gbps, "QDR")
        dev.attrs[port] = {"rate": f"{rate_gbps} Gb/sec (4X {suffix})", "link_layer": link_layer}
        _write(p / "rate", dev.attrs[port]["rate"])
        self.set_state(device, port, 4)
        if netdev is not None:
            dev.netdevs[port] = netdev
            (p / "gid_attrs" / "ndevs").mkdir(parents=True, exist_ok=True)
            for gid in range(4):
                _write(p / "gid_attrs" / "ndevs" / str(gid), netdev)
        for cname, cvalue in (values or {}).items():
            self.set(device, port, cname, cvalue)
        return p

    def port_path(self, device: str, port: str = "1") -> Path:
        """``class/infiniband/<device>/ports/<port>``."""
        return self.sys_root / "class" / "infiniband" / device / "ports" / port

    def set_state(self, device: str, port: str, state: int, phys: int | None = None) -> None:
        """Logical (and physical) port state; a down port is also physically polling."""
        p = self.port_path(device, port)
        phys = phys if phys is not None else (5 if state >= 2 else 2)
        _write(p / "state", f"{state}: {_STATES.get(state, 'UNKNOWN')}")
        _write(p / "phys_state", f"{phys}: {_PHYS.get(phys, 'Unknown')}")

    def set(self, device: str, port: str, name: str, value: int | str) -> None:
        """Write one counter (in place)."""
        sub = self._devices[device].ports[port].get(name, "hw_counters")
        self._devices[device].ports[port][name] = sub
        _write(self.port_path(device, port) / sub / name, str(value))

    def get(self, device: str, port: str, name: str) -> int:
        """Read one counter back."""
        sub = self._devices[device].ports[port][name]
        return int((self.port_path(device, port) / sub / name).read_text())

    def advance(self, device: str, port: str, name: str, delta: int, *, bits: int = 64) -> int:
        """Add ``delta`` to a counter, wrapping at ``2**bits``; return the new value."""
        value = (self.get(device, port, name) + delta) % (1 << bits)
        self.set(device, port, name, value)
        return value

    def remove(self, device: str, port: str, name: str) -> None:
        """Delete one counter file (firmware hiding it, optional counter switched off)."""
        sub = self._devices[device].ports[port].pop(name)
        (self.port_path(device, port) / sub / name).unlink()

    def unplug(self, device: str) -> None:
        """Hot-unplug: the whole ``class/infiniband/<device>`` directory goes away."""
        shutil.rmtree(self.sys_root / "class" / "infiniband" / device)

    def replug(self, device: str) -> None:
        """The device comes back with fresh (zeroed) counters and the same layout."""
        dev = self._devices.pop(device)
        for port in list(dev.ports):
            congestion = "np_cnp_sent" in dev.ports[port]
            rate = int(dev.attrs[port]["rate"].split()[0])
            self.add_rdma_port(
                device,
                port,
                pci=dev.pci,
                link_layer=dev.attrs[port]["link_layer"],
                rate_gbps=rate,
                netdev=dev.netdevs.get(port),
                congestion=congestion,
            )

    # -- ethtool ----------------------------------------------------------------

    def add_ethtool(self, netdev: str, names: list[str]) -> None:
        """Create a statistics dump for ``netdev`` with every name at 0."""
        self._stats[netdev] = dict.fromkeys(names, 0)
        self._flush(netdev)

    def set_stat(self, netdev: str, name: str, value: int) -> None:
        """Set one driver statistic."""
        self._stats[netdev][name] = value
        self._flush(netdev)

    def advance_stat(self, netdev: str, name: str, delta: int) -> int:
        """Add to one driver statistic (u64); return the new value."""
        value = (self._stats[netdev].get(name, 0) + delta) % (1 << 64)
        self.set_stat(netdev, name, value)
        return value

    def advance_pause(
        self,
        netdev: str,
        priority: int,
        paused_seconds: float,
        link_bps: float,
        *,
        direction: str = "rx",
        duration: bool = True,
    ) -> None:
        """Advance pause frames (and duration when the driver has it) for a paused interval."""
        stats = self._stats[netdev]
        frames = f"{direction}_prio{priority}_pause"
        stats[frames] = stats.get(frames, 0) + pause_frames_for(paused_seconds, link_bps)
        if duration:
            dur = f"{direction}_prio{priority}_pause_duration"
            stats[dur] = stats.get(dur, 0) + round(paused_seconds * 1e6)
        self._flush(netdev)

    def _flush(self, netdev: str) -> None:
        lines = ["NIC statistics:"]
        lines += [f"     {k}: {v}" for k, v in self._stats[netdev].items()]
        _write(self.ethtool_dir / netdev, "\n".join(lines) + "\n")


def _write(path: Path, text: str) -> None:
    # Open without O_TRUNC-then-replace semantics of a new inode: readers
    # holding the file open see the new value, as with sysfs.
    with path.open("w", encoding="utf-8") as f:
        f.write(text + ("" if text.endswith("\n") else "\n"))


def _symlink(link: Path, target: Path) -> None:
    if link.is_symlink():
        link.unlink()
    # Relative links, as sysfs has, so the tree can be resolved under any root.
    link.symlink_to(Path(os.path.relpath(target, link.parent)))
