"""diskstats, mountstats and mountinfo parsers on real-format fixtures and on garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.collectors.storage._diskstats import parse_diskstats, parse_line
from fabricwatch.collectors.storage._mounts import (
    find_mount,
    parse_mountinfo,
    resolve_path,
)
from fabricwatch.collectors.storage._mounts import parse_line as parse_mount_line
from fabricwatch.collectors.storage._mountstats import parse_mountstats, unescape
from fabricwatch.errors import ParseError

from .conftest import data

# --- diskstats ----------------------------------------------------------------------


def test_diskstats_14_fields_kernel_4_14() -> None:
    parsed = parse_diskstats(data("diskstats-4.14.txt"))
    assert parsed.errors == ()
    sda = parsed.devices[0]
    assert (sda.major, sda.minor, sda.name, sda.dev) == (8, 0, "sda", "8:0")
    assert (sda.writes, sda.write_sectors, sda.write_ms) == (1210662, 98730424, 4010230)
    assert (sda.in_flight, sda.io_ms, sda.weighted_io_ms) == (0, 731320, 4064230)
    assert sda.discards is None and sda.flushes is None and sda.flush_ms is None
    assert [d.name for d in parsed.devices] == ["sda", "sda1", "nvme0n1", "md0"]
    assert parsed.devices[2].in_flight == 2


def test_diskstats_18_fields_has_discards_not_flushes() -> None:
    parsed = parse_diskstats(data("diskstats-4.19.txt"))
    assert parsed.errors == ()
    nvme = parsed.devices[1]
    assert nvme.name == "nvme0n1"
    assert (nvme.discards, nvme.discard_sectors, nvme.discard_ms) == (1234, 882134, 112)
    assert nvme.flushes is None
    assert parsed.devices[3].name == "dm-0" and parsed.devices[3].write_ms == 5000000


def test_diskstats_20_fields_has_flushes() -> None:
    parsed = parse_diskstats(data("diskstats-6.1.txt"))
    assert parsed.errors == ()
    nvme = parsed.devices[2]
    assert (nvme.flushes, nvme.flush_ms) == (412331, 186121)
    assert nvme.write_sectors == 3312331456
    assert parsed.devices[5].name == "sda" and parsed.devices[5].flushes == 1233


def test_diskstats_future_extra_fields_are_ignored() -> None:
    line = " 259 0 nvme9n1 " + " ".join(str(i) for i in range(1, 18)) + " 99 98"
    d = parse_line(line)
    assert d.flush_ms == 17 and d.writes == 5


def test_diskstats_this_kernel_parses() -> None:
    """The real file of the machine running the tests."""
    parsed = parse_diskstats(Path("/proc/diskstats").read_text())
    assert parsed.errors == ()
    assert parsed.devices


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("8 0 sda 1 2 3", "expected 14, 18 or 20"),
        ("8 0 sda " + " ".join(["1"] * 12), "got 15"),  # truncated mid-line
        ("8 0 sda 1 2 x 4 5 6 7 8 9 10 11", "'x' is not a non-negative integer"),
        ("8 0 sda 1 2 -3 4 5 6 7 8 9 10 11", "negative counter"),
        ("eight 0 sda 1 2 3 4 5 6 7 8 9 10 11", "'eight'"),
    ],
)
def test_diskstats_bad_lines_name_the_problem(line: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle) as exc:
        parse_line(line, source="/proc/diskstats", lineno=3)
    assert "/proc/diskstats:3" in str(exc.value)


def test_diskstats_garbage_keeps_good_lines() -> None:
    text = data("diskstats-6.1.txt") + "\x00\xff garbage here\n   8  16 sdb 1 2\n"
    parsed = parse_diskstats(text)
    assert len(parsed.devices) == 7
    assert len(parsed.errors) == 2
    assert parsed.errors[0].line == 8


def test_diskstats_binary_noise_never_raises() -> None:
    noise = bytes(range(256)).decode("latin-1") * 20
    parsed = parse_diskstats(noise)
    assert parsed.devices == ()
    assert parsed.errors


# --- mountstats ---------------------------------------------------------------------


def test_mountstats_nfs_v3_write_commit_read() -> None:
    parsed = parse_mountstats(data("mountstats-nfs.txt"))
    assert parsed.errors == ()
    assert set(parsed.mounts) == {"/mnt/ckpt v3", "/mnt/ckpt4"}
    v3 = parsed.mounts["/mnt/ckpt v3"]
    assert (v3.export, v3.fstype, v3.version, v3.server) == (
        "10.20.0.5:/export/ckpt",
        "nfs",
        "3",
        "10.20.0.5",
    )
    assert v3.age == 93211 and v3.xprt == "tcp" and v3.opts["proto"] == "tcp"
    w = v3.ops["WRITE"]
    assert (w.ops, w.transmissions, w.timeouts) == (4304213, 4304220, 2)
    assert w.retransmissions == 7
    assert (w.bytes_sent, w.rtt_ms, w.execute_ms, w.errors) == (
        4513011233312,
        20123312,
        21412331,
        0,
    )
    assert v3.ops["COMMIT"].execute_ms == 412402
    assert v3.ops["READ"].bytes_received == 88306392
    assert v3.bytes is not None and v3.bytes.server_write == 4512331123312


def test_mountstats_nfs_v4_with_nconnect() -> None:
    v4 = parse_mountstats(data("mountstats-nfs.txt")).mounts["/mnt/ckpt4"]
    assert (v4.fstype, v4.version, v4.server) == ("nfs4", "4.1", "filer-a.example")
    assert v4.ops["WRITE"].ops == 1995508 and v4.ops["WRITE"].timeouts == 1
    assert v4.ops["OPEN"].errors == 2
    assert v4.bytes is not None and v4.bytes.direct_write == 1048576000


def test_mountstats_iostats_1_0_has_no_errors_field() -> None:
    m = parse_mountstats(data("mountstats-v1.0.txt")).mounts["/mnt/old"]
    assert m.ops["WRITE"].errors is None
    assert m.ops["WRITE"].retransmissions == 2
    assert m.xprt == "udp" and m.statvers == "1.0"


def test_mountstats_this_machine_parses() -> None:
    parsed = parse_mountstats(Path("/proc/self/mountstats").read_text())
    assert parsed.errors == ()


def test_mountstats_truncated_op_line_is_an_error_rest_kept() -> None:
    text = data("mountstats-nfs.txt")
    cut = text.index("COMMIT: 1033") + len("COMMIT: 1033 1033 0")
    parsed = parse_mountstats(text[:cut])
    assert len(parsed.errors) == 1
    assert "op COMMIT has 3 fields" in str(parsed.errors[0])
    v3 = parsed.mounts["/mnt/ckpt v3"]
    assert "WRITE" in v3.ops and "COMMIT" not in v3.ops
    assert "/mnt/ckpt4" not in parsed.mounts


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("\t       WRITE: 5 7 1 20960 680 3 41 4x5", "'4x5' is not an integer"),
        ("\tbytes:\t10 20", "bytes has 2 fields"),
        ("\tage:\tyesterday", "'yesterday'"),
        ("device 10.0.0.9:/x mounted at /y with fstype nfs", "malformed device line"),
        ("\tsomething odd", "unexpected line"),
    ],
)
def test_mountstats_garbage_lines(bad: str, needle: str) -> None:
    head = (
        "device 10.0.0.9:/old mounted on /mnt/old with fstype nfs statvers=1.1\n"
        "\tage:\t5\n\tper-op statistics\n"
        if "WRITE" in bad
        else "device 10.0.0.9:/old mounted on /mnt/old with fstype nfs statvers=1.1\n"
    )
    parsed = parse_mountstats(head + bad + "\n")
    assert any(needle in str(e) for e in parsed.errors), parsed.errors


def test_mountstats_noise_never_raises() -> None:
    parsed = parse_mountstats("device \n\t:\n" + bytes(range(256)).decode("latin-1"))
    assert parsed.mounts == {}
    assert parsed.errors


def test_unescape() -> None:
    assert unescape(r"/mnt/a\040b\011c\134d") == "/mnt/a b\tc\\d"


# --- mountinfo -------------------------------------------------------------------


def test_mountinfo_fields_and_escapes() -> None:
    parsed = parse_mountinfo(data("mountinfo.txt"))
    assert parsed.errors == ()
    nfs = next(m for m in parsed.mounts if m.fstype == "nfs")
    assert nfs.mountpoint == "/mnt/ckpt v3" and nfs.source == "10.20.0.5:/export/ckpt"
    assert nfs.is_nfs and nfs.dev == "0:48" and nfs.mount_id == 52
    xfs = next(m for m in parsed.mounts if m.mountpoint == "/scratch")
    assert (xfs.fstype, xfs.source, xfs.dev) == ("xfs", "/dev/nvme1n1", "259:2")


@pytest.mark.parametrize(
    ("path", "mountpoint", "fstype"),
    [
        ("/", "/", "ext4"),
        ("/home/user/ckpt", "/", "ext4"),
        ("/scratch", "/scratch", "xfs"),
        ("/scratchy", "/", "ext4"),  # a prefix string is not a parent directory
        ("/scratch/run1", "/scratch", "xfs"),
        ("/mnt/ckpt v3/job7", "/mnt/ckpt v3", "nfs"),
        ("/mnt/ckpt4", "/mnt/ckpt4", "nfs4"),
        ("/scratch/tmp/x", "/scratch/tmp", "xfs"),  # the later overmount wins
    ],
)
def test_find_mount(path: str, mountpoint: str, fstype: str) -> None:
    mounts = parse_mountinfo(data("mountinfo.txt")).mounts
    m = find_mount(mounts, path)
    assert m is not None
    assert (m.mountpoint, m.fstype) == (mountpoint, fstype)


def test_find_mount_nothing_mounted() -> None:
    assert find_mount((), "/x") is None


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 ext3 /dev/root rw", "no ' - ' separator"),
        ("36 35 98:0 /mnt1 /mnt2 rw - ext3", "expected at least 10 fields"),
        ("x 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw", "not integers"),
        ("36 35 980 /mnt1 /mnt2 rw - ext3 /dev/root rw", "not major:minor"),
        ("36 35 98:0 /mnt1 mnt2 rw - ext3 /dev/root rw", "not absolute"),
    ],
)
def test_mountinfo_bad_lines(line: str, needle: str) -> None:
    with pytest.raises(ParseError, match=needle):
        parse_mount_line(line)


def test_mountinfo_this_machine_and_real_mapping(tmp_path: Path) -> None:
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    assert mounts.errors == ()
    m = find_mount(mounts.mounts, resolve_path(str(tmp_path)))
    assert m is not None
    assert f"{m.major}:{m.minor}" == _st_dev(tmp_path)


def _st_dev(p: Path) -> str:
    import os

    st = p.stat()
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def test_resolve_path_follows_symlinks_and_missing_tail(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert resolve_path(str(tmp_path / "link" / "not" / "yet")) == str(real / "not" / "yet")
    assert resolve_path(str(tmp_path / "link" / ".." / "real")) == str(real)
