"""Fixtures of the GPU collector tests: fake NVML profiles from the real captures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ._fakes import FakeGpu, FakeNvml, a100_gpus, b200_gpus, h100_gpus

MakeNvml = Callable[..., FakeNvml]


@pytest.fixture
def h100(shared_data: Path) -> list[FakeGpu]:
    """8x H100 (Hopper, GPM, 18 links) from the nvidia-smi -q capture."""
    return h100_gpus(shared_data)


@pytest.fixture
def a100(shared_data: Path) -> list[FakeGpu]:
    """8x A100 (Ampere, MIG, no GPM, 12 links) from the XML and nvlink captures."""
    return a100_gpus(shared_data)


@pytest.fixture
def b200(shared_data: Path) -> list[FakeGpu]:
    """8x Blackwell with NVLink5 field IDs and a GB200 fabric clique."""
    return b200_gpus(shared_data)


@pytest.fixture
def make_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeNvml]:
    """Install a :class:`FakeNvml` into the real pynvml module; releases hung calls at the end."""
    made: list[FakeNvml] = []

    def make(gpus: list[FakeGpu], **kw: object) -> FakeNvml:
        fake = FakeNvml(gpus, **kw)  # type: ignore[arg-type]
        made.append(fake.install(monkeypatch))
        return fake

    yield make
    for fake in made:
        for g in fake.gpus:
            if g.hang is not None:
                g.hang.set()
