"""The cross-check generator (bench/crosscheck_traces.py) writes traces replay reads.

The red-team evaluation is only meaningful if every family it writes reaches
the engine: a trace whose names replay does not map would score the engine on
data it never saw (the NVLink CRC error counter included, which issue #16,
mechanism 6, had replay map).
"""

from __future__ import annotations

import re

import pytest

from bench import crosscheck_traces as gen
from fabricwatch.engine.replay_mapping import Mapper
from fabricwatch.engine.replay_openmetrics import parse_openmetrics

_KEY = re.compile(r"(switch:[^:]+:[^:]+(:\d)?|nic:[^:]+:\d+(:\d)?|gpu:\d+(:link:\d+)?|storage:.+)")


@pytest.mark.parametrize(
    ("scenario", "variant", "spacing"),
    [
        ("pfc_nic_tx", "noisy", 1.0),
        ("pfc_switch", "two_jobs", 15.0),
        ("slowstore_nfs", "ramp", 5.0),
        ("ecn_stall", "missing_family", 30.0),
        ("nvlink_crc", "concurrent", 10.0),
    ],
)
def test_trace_parses_with_every_family_mapped(scenario: str, variant: str, spacing: float) -> None:
    trace = gen.generate(7, scenario, variant, spacing)
    mapper = Mapper()
    parse_openmetrics(trace.text.splitlines(), mapper, source=f"{scenario}.om")
    samples = mapper.finish()
    assert samples, "no sample reached a fabricwatch family"
    assert not mapper.ignored, mapper.ignored
    families = {s[1] for s in samples}
    # Work signal, power and node-side counters all arrive.
    assert {"fabricwatch_gpu_power_watts", "fabricwatch_nic_link_up"} <= families
    (truth,) = trace.truth
    assert trace.start < truth.fault_onset <= truth.onset < truth.end < trace.end
    assert truth.end - truth.onset >= 3 * spacing  # counts for recall
    assert all(_KEY.fullmatch(k) for k in truth.culprits), truth.culprits


def test_fault_precedes_the_idle_gpus_by_part_of_an_iteration() -> None:
    trace = gen.generate(3, "link_down", "standard", 1.0)
    (truth,) = trace.truth
    periods = trace.params["periods"]
    assert isinstance(periods, list)
    period = float(periods[0])
    assert 0.4 * period <= truth.onset - truth.fault_onset <= 2.0 * period
    # dcgm-exporter SM activity of a job GPU is near zero through the stall.
    key = next(k for k in trace.series if k.startswith('DCGM_FI_DEV_POWER_USAGE{gpu="0"'))
    during = [v for t, v in trace.series[key] if truth.onset + 2 < t < truth.end]
    before = [v for t, v in trace.series[key] if truth.onset - 60 < t < truth.fault_onset]
    assert during and before
    assert max(during) < 0.5 * max(before)


def test_same_arguments_same_trace() -> None:
    a = gen.generate(11, "checkpoint_nvme", "noisy", 5.0)
    b = gen.generate(11, "checkpoint_nvme", "noisy", 5.0)
    assert a.text == b.text and a.truth == b.truth


def test_a_slowdown_drawn_as_an_allreduce_loss_keeps_the_compute_phase() -> None:
    # The same draw mapped into the range: the rest of the trace is unchanged,
    # and the exchange is slower by the drawn share, the compute phase not.
    deep = gen.generate(7, "ecn_slow", "standard", 5.0)
    shallow = gen.generate(7, "ecn_slow", "standard", 5.0, allreduce_loss=(0.3, 0.7))
    loss = shallow.params["allreduce_loss"]
    assert isinstance(loss, float) and 0.3 <= loss < 0.7
    assert "allreduce_loss" not in deep.params
    assert deep.truth == shallow.truth and deep.confounders == shallow.confounders
    fracs, periods = shallow.params["compute_frac"], shallow.params["periods"]
    assert isinstance(fracs, list) and isinstance(periods, list)
    comm = (1 - float(fracs[0])) * float(periods[0])
    assert shallow.params["comm_stretched_s"] == pytest.approx(comm / (1 - loss), abs=0.01)
    stretch, deeper = shallow.params["stretch"], deep.params["stretch"]
    assert isinstance(stretch, float) and isinstance(deeper, float)
    assert 1.0 < stretch < deeper
