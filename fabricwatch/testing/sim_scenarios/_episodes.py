"""Real-episode shapes: generators that rebuild documented real stalls as scenarios.

The real traces are public but not in the repository: the Zhejiang Lab LLM
Trace Program (``github.com/zhejianglab/Zhejiang-Lab-Cluster-Traces`` @
``3f6ce42c``, CC-BY 4.0: "Zhejiang Lab, Zhejiang Lab LLM Trace Program,
2024"), ``cluster_2000_A100/`` (2,024 A100 in 253 servers, RoCE 200G). These
generators rebuild the shapes measured in it, with every number a parameter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime

from fabricwatch.testing.sim_scenarios._model import Injection
from fabricwatch.testing.sim_scenarios._sim import Scenario


@dataclass(frozen=True, slots=True)
class CounterArtefacts:
    """Counter artefacts of the Zhejiang switch data (0.5 s port samples).

    Measured over the 128 job ports of ``trafficinfo/2024052400/``.

    Attributes:
        zero_delta_ratio: share of polls whose port counters were not
            refreshed (38 %: ~1 s refresh; the rows alternate value / 0).
        short_gaps_per_hour: switch-collector gaps of ``short_gap_s`` (44 per
            port-hour).
        short_gap_s: their length range (2-5 s).
        long_gaps_per_hour: gaps of ``long_gap_s`` (one ~250 s in the hour).
        long_gap_s: their length. After any gap the first row holds the whole
            accumulated delta (the simulated counters keep counting while the
            collector is away).
    """

    zero_delta_ratio: float = 0.38
    short_gaps_per_hour: float = 44.0
    short_gap_s: tuple[float, float] = (2.0, 5.0)
    long_gaps_per_hour: float = 1.0
    long_gap_s: float = 250.0

    def gaps(self, rng: random.Random, duration: int) -> list[Injection]:
        """Switch-collector gaps over ``duration`` seconds (``target`` 2 = switch):
        the documented count per hour pro rata, at least one of each kind."""
        out: list[Injection] = []
        for per_hour, length in (
            (self.short_gaps_per_hour, self.short_gap_s),
            (self.long_gaps_per_hour, (self.long_gap_s, self.long_gap_s)),
        ):
            if per_hour <= 0:
                continue
            for _ in range(max(1, round(per_hour * duration / 3600.0))):
                gap = rng.uniform(*length)
                start = rng.uniform(0.0, max(duration - gap - 1.0, 0.0))
                out.append(Injection("collector_gap", start, gap, target=2))
        return out


@dataclass(frozen=True, slots=True)
class ZhejiangJobStall:
    """The 2024-05-23T16:07:52Z job stall (Zhejiang ``trafficinfo/2024052400/``).

    A 128-port job fell from ~8.7 Tbit/s to < 0.2 Tbit/s: ~0 for 12-14 s,
    partial for 4 s, ~0 again for 6-9 s, recovered after ~28 s, while the
    storage leaves carried the hour's biggest burst (1.1-1.4 Tbit/s against
    a 0.07 Tbit/s median) and PFC/ECN stayed flat; other jobs ran on. The
    cause is documented as "job stall, likely storage/checkpoint
    (unconfirmed)": the expected cause here is ``checkpoint_write``.

    Per node, the storage rates are the cluster's spread over its servers
    (253): the burst keeps its documented 16-20x ratio to the median, the
    smallest per-node burst consistent with the data (if only the job's
    nodes wrote it, theirs was larger). The level of the partial phase is
    not documented (``partial_level`` is an assumption); the time between
    the second idle phase and "recovered after ~28 s" is partial too.
    """

    onset_utc: str = "2024-05-23T16:07:52Z"
    first_idle_s: tuple[float, float] = (12.0, 14.0)
    partial_s: float = 4.0
    partial_level: float = 0.4
    second_idle_s: tuple[float, float] = (6.0, 9.0)
    recovered_after_s: float = 28.0
    storage_burst_tbit_s: tuple[float, float] = (1.1, 1.4)
    storage_median_tbit_s: float = 0.07
    cluster_servers: int = 253
    artefacts: CounterArtefacts = field(default_factory=CounterArtefacts)


@dataclass(frozen=True, slots=True)
class LlamaCheckpoints:
    """The 4 checkpoint stalls of the Llama-2-7B log.

    Zhejiang ``taskinfo/20240429-0613-4/``: 32 A100, DeepSpeed ZeRO, a save
    every 500 steps; median iteration 45.8 s, the 4 iterations with a save
    78.7-79.8 s, i.e. ~33 s of stall each (spread evenly over the documented
    range here; the individual values are not documented). The rank-0 node
    writes weights (~10 s), model states (13.7 s, ~1 GB/s) and its optimizer
    shard (2.4 s) at the start of the stall, then waits; another node writes
    only its optimizer shard. The switch counters carry the §6 artefacts.

    ``spacing_s`` None is the real spacing (500 x 45.8 s = 6.4 h between
    saves); tests shorten it (the engine keeps no state across ~10 minutes).
    """

    median_iteration_s: float = 45.8
    save_iteration_s: tuple[float, float] = (78.7, 79.8)
    saves: int = 4
    steps_between_saves: int = 500
    weights_s: float = 10.0
    model_states_s: float = 13.7
    optimizer_shard_s: float = 2.4
    write_bytes_s: float = 1e9
    rank0: bool = True
    spacing_s: float | None = None
    artefacts: CounterArtefacts = field(default_factory=CounterArtefacts)

    def stalls(self) -> list[float]:
        """Seconds of stall of each save (save iteration - median iteration)."""
        lo, hi = self.save_iteration_s
        n = self.saves
        return [lo + (hi - lo) * i / max(n - 1, 1) - self.median_iteration_s for i in range(n)]


def _utc(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def zhejiang_job_stall(
    seed: int = 1, shape: ZhejiangJobStall | None = None, *, lead_s: int = 900, tail_s: int = 300
) -> Scenario:
    """One node of the job through the 16:07:52Z stall (see :class:`ZhejiangJobStall`).

    The stall starts ``lead_s`` seconds in, at its real wall time.
    """
    shape = shape or ZhejiangJobStall()
    r = random.Random(seed)  # noqa: S311 - simulation, not crypto
    first = round(r.uniform(*shape.first_idle_s))
    second = round(r.uniform(*shape.second_idle_s))
    partial = round(shape.partial_s)
    total = max(round(shape.recovered_after_s), first + partial + second)
    tail = total - first - partial - second
    profile: tuple[tuple[int, float], ...] = (
        (first, 0.0),
        (partial, shape.partial_level),
        (second, 0.0),
    )
    if tail:
        profile += ((tail, shape.partial_level),)
    per_node = 1e12 / 8 / shape.cluster_servers
    duration = lead_s + total + tail_s
    inj = [
        Injection(
            "checkpoint_write",
            lead_s,
            total,
            profile=tuple((float(sec), lvl) for sec, lvl in profile),
            write_rate=r.uniform(*shape.storage_burst_tbit_s) * per_node,
        )
    ]
    inj += shape.artefacts.gaps(r, duration)
    return Scenario(
        duration=duration,
        injections=inj,
        seed=seed,
        start_ts=_utc(shape.onset_utc) - lead_s,
        switch_stale=shape.artefacts.zero_delta_ratio,
        storage_base=shape.storage_median_tbit_s * per_node,
    )


def llama_checkpoint_stalls(
    seed: int = 1, shape: LlamaCheckpoints | None = None, *, lead_s: int = 900
) -> Scenario:
    """One node of the Llama-2-7B run through its 4 saves (see :class:`LlamaCheckpoints`)."""
    shape = shape or LlamaCheckpoints()
    r = random.Random(seed)  # noqa: S311 - simulation, not crypto
    spacing = shape.spacing_s
    if spacing is None:
        spacing = shape.steps_between_saves * shape.median_iteration_s
    writes = (
        shape.weights_s + shape.model_states_s + shape.optimizer_shard_s
        if shape.rank0
        else shape.optimizer_shard_s
    )
    inj: list[Injection] = []
    stalls = shape.stalls()
    for i, stall in enumerate(stalls):
        start = lead_s + i * spacing
        inj.append(
            Injection(
                "checkpoint_write",
                start,
                round(stall),
                # Writing first, then waiting for the slowest rank; both idle.
                write_rate=shape.write_bytes_s,
                write_s=round(min(writes, stall)),
            )
        )
    duration = round(lead_s + (len(stalls) - 1) * spacing + max(stalls, default=0.0) + 300)
    inj += shape.artefacts.gaps(r, duration)
    return Scenario(
        duration=duration,
        injections=inj,
        seed=seed,
        switch_stale=shape.artefacts.zero_delta_ratio,
    )
