"""The scenario simulator's output, pinned bit for bit.

Every injection kind and variant, every switchable family group, the node
shapes and the real-episode generators are run over their whole span and
hashed (every reading's family, labels, value and timestamp as exact float
hex, plus the ground truth). The digests were recorded from the simulator as
it was before its injection handlers were split out of one function; a
restructuring that changes a single random draw, its order or a value fails
here, naming the scenario.

Regenerate only for an intended change of the simulated telemetry:
``python -m tests.testing.test_sim_scenarios > tests/data/testing/sim_scenarios_fingerprints.json``
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricwatch.readings import Reading
from fabricwatch.testing.sim_scenarios import (
    CONFOUNDERS,
    FAULTS,
    Injection,
    LlamaCheckpoints,
    NodeSpec,
    Scenario,
    llama_checkpoint_stalls,
    zhejiang_job_stall,
)

GOLDEN = Path(__file__).parent.parent / "data" / "testing" / "sim_scenarios_fingerprints.json"
KINDS = (*FAULTS, *CONFOUNDERS)
GROUPS = ("switch", "congestion", "nvlink", "sm", "probe", "burst")


def _random_mix(seed: int) -> Scenario:
    """Overlapping injections of every kind, drawn from ``seed`` (interactions)."""
    r = random.Random(seed)
    inj = [
        Injection(
            r.choice(KINDS),
            r.uniform(0, 280),
            r.uniform(1, 60),
            magnitude=r.random(),
            target=r.randrange(8),
            variant=r.randrange(8),
        )
        for _ in range(12)
    ]
    return Scenario(duration=300, injections=inj, seed=seed)


def scenarios() -> Iterator[tuple[str, Scenario]]:
    """Every named scenario of the pinned set."""
    for what in KINDS:
        for variant in range(8):
            inj = Injection(
                what, 10.4, 40, magnitude=(variant + 1) / 9, target=variant + 1, variant=variant
            )
            yield f"{what}-v{variant}", Scenario(duration=60, injections=[inj], seed=variant + 3)
    yield (
        "checkpoint-profile",
        Scenario(
            duration=60,
            injections=[
                Injection("checkpoint_write", 10, 30, profile=((5, 0.0), (4, 0.4), (6, 0.0)))
            ],
        ),
    )
    yield (
        "checkpoint-write-rate",
        Scenario(
            duration=60,
            injections=[Injection("checkpoint_write", 10, 30, write_rate=1e9, write_s=12)],
        ),
    )
    both = [Injection("pfc_storm", 10, 20), Injection("checkpoint_write", 30, 20, magnitude=0.8)]
    for group in GROUPS:
        yield (
            f"off-{group}",
            Scenario(duration=60, injections=both, families_off=frozenset({group})),
        )
    yield "switch-stale", Scenario(duration=60, injections=both, switch_stale=0.38, seed=5)
    yield "storage-base", Scenario(duration=60, injections=both, storage_base=3e6, seed=6)
    yield "no-missing", Scenario(duration=60, injections=both, missing=0.0, seed=7)
    yield (
        "small-node",
        Scenario(
            duration=60,
            injections=[Injection("nvlink_degraded", 10, 30, target=5, variant=7)],
            node=NodeSpec(gpus=4, links_per_gpu=3),
            switch_refresh=3,
        ),
    )
    for seed in range(6):
        yield f"mix-{seed}", _random_mix(seed)
    yield "zhejiang", zhejiang_job_stall(seed=2, lead_s=60, tail_s=30)
    yield (
        "llama",
        llama_checkpoint_stalls(seed=3, shape=LlamaCheckpoints(spacing_s=120), lead_s=30),
    )


def _reading(rd: Reading) -> str:
    ts = "-" if rd.ts is None else rd.ts.hex()
    return f"{rd.name}|{','.join(rd.labels)}|{rd.value.hex()}|{ts}|{rd.epoch}|{rd.histogram}"


def fingerprint(sc: Scenario) -> str:
    """SHA-256 of the scenario's ground truth and of every reading of every step."""
    h = hashlib.sha256()
    h.update(repr(sc.truth()).encode())
    for t, batches in sc.steps():
        h.update(f"@{t.hex()}".encode())
        for coll, readings in batches:
            h.update(f"#{coll}:{len(readings)}".encode())
            for rd in readings:
                h.update(_reading(rd).encode())
    return h.hexdigest()


def test_every_scenario_matches_its_recorded_fingerprint() -> None:
    golden: dict[str, str] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = {name: fingerprint(sc) for name, sc in scenarios()}
    assert set(got) == set(golden)
    changed = sorted(name for name in got if got[name] != golden[name])
    assert changed == []


def test_fingerprint_sees_one_changed_value() -> None:
    sc = Scenario(duration=5, seed=1)
    base = fingerprint(sc)
    assert fingerprint(Scenario(duration=5, seed=1)) == base
    assert fingerprint(Scenario(duration=5, seed=2)) != base
    assert fingerprint(Scenario(duration=5, seed=1, storage_base=1.0)) != base


@pytest.mark.parametrize("what", KINDS)
def test_every_kind_changes_the_telemetry(what: str) -> None:
    # A kind whose handler did nothing would pin an empty behaviour.
    healthy = fingerprint(Scenario(duration=60, seed=4))
    inj = Injection(what, 10, 40, magnitude=0.7, target=1, variant=1)
    assert fingerprint(Scenario(duration=60, injections=[inj], seed=4)) != healthy


if __name__ == "__main__":
    json.dump({name: fingerprint(sc) for name, sc in scenarios()}, sys.stdout, indent=1)
    sys.stdout.write("\n")
