"""Rendering: the live view, plain progress lines and the summary tables, on fixed values."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from fabricwatch.demo.view import (
    GpuRow,
    PlainReporter,
    Status,
    bar,
    cause_table,
    incident_line,
    render,
    summary_table,
)


def _text(renderable: Any, width: int = 120) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def _status() -> Status:
    return Status(
        t=42.0,
        speed=10,
        scenario="pfc-storm",
        title="PFC pause storm on a switch uplink",
        index=2,
        total=6,
        phase="fault: PFC pause storm on a switch uplink",
        gpus=[GpuRow(str(i), 0.01, 1.0, 90.0, "pfc_storm") for i in range(7)]
        + [GpuRow("7", None, None, None)],
        uplink_pause=0.97,
        nic_pause=0.25,
        ecn_rate=1234.0,
        xmit_wait=0.02,
        nic_link_up=1.0,
        uplink_up=0.0,
        nvlinks_down=1,
        write_latency=0.45,
        write_rate=1.6e9,
        open_incidents=[
            {
                "cause": "pfc_storm",
                "culprit": {"key": "switch:leaf1:Ethernet0:3"},
                "gpu_seconds_lost": 96.4,
                "evidence": [{"text": "PFC pause storm on switch leaf1 port Ethernet0"}],
            }
        ],
        pages=3,
        metrics_url="http://127.0.0.1:1234/metrics",
        webhook_url="http://127.0.0.1:5678/hooks/fabricwatch",
    )


def test_live_view_shows_gpus_fabric_storage_and_incidents() -> None:
    text = _text(render(_status(), [f"event {i}" for i in range(20)], max_events=3))
    assert "scenario 2/6: pfc-storm" in text
    assert text.count("pfc_storm") == 7  # the stalled GPUs, by cause
    assert "97%" in text  # uplink pause
    assert "1,234/s" in text  # ECN
    assert "DOWN" in text  # uplink down
    assert "450 ms" in text
    assert "1,600 MB/s" in text
    assert "PFC pause storm" in text
    assert "switch:leaf1:Ethernet0:3" in text
    assert "pages received: 3" in text
    assert "http://127.0.0.1:1234/metrics" in text
    # Only the newest events fit.
    assert "event 19" in text
    assert "event 16" not in text
    # An unknown value is shown as such, not as zero.
    assert "·" in text


def test_live_view_of_a_fresh_status_renders() -> None:
    text = _text(render(Status(), []))
    assert "(nothing yet)" in text
    assert "none" in text


def test_bars() -> None:
    assert bar(0.5, 10).plain == "█████░░░░░"
    assert bar(1.7, 4).plain == "████"
    assert bar(-1, 4).plain == "░░░░"
    assert bar(None, 3).plain == "···"


def test_plain_reporter_prints_events_and_a_status_line_every_few_seconds() -> None:
    out = io.StringIO()
    rep = PlainReporter(out, every=5.0)
    st = _status()
    for t in (0.0, 1.0, 4.9, 5.0, 7.0, 10.5):
        st.t = t
        rep.update(st)
    rep.event(3.25, "inject   something")
    rep.close()
    lines = out.getvalue().splitlines()
    status = [ln for ln in lines if "status" in ln]
    assert [ln.split("]")[0] for ln in status] == ["[+   0.0s", "[+   5.0s", "[+  10.5s"]
    assert "GPU SM 0.01 (7/8 stalled)" in status[0]
    assert "uplink pause 97%" in status[0]
    assert "[+   3.2s] inject   something" in lines


def test_incident_lines() -> None:
    doc = {
        "cause": "link_down",
        "culprit": {"key": "nic:mlx5_0:1"},
        "confidence": 0.98,
        "summary": "GPUs 0-7 idle for 2 s",
        "gpu_seconds_lost": 77.6,
    }
    assert incident_line("opened", doc) == (
        "incident opened   link_down on nic:mlx5_0:1 (confidence 0.98): GPUs 0-7 idle for 2 s"
    )
    assert incident_line("resolved", doc).endswith(": 78 GPU-seconds lost")


def _summary(ok: bool) -> dict[str, Any]:
    return {
        "alerting": True,
        "scenarios": [
            {
                "name": "healthy",
                "expected": None,
                "incidents": [],
                "detection_latency_seconds": None,
                "injected_gpu_seconds": 0.0,
                "pages": [],
                "ok": True,
                "reason": "no incident",
            },
            {
                "name": "pfc-storm",
                "expected": {"cause": "pfc_storm", "culprits": ["switch:leaf1:Ethernet0:3"]},
                "incidents": [
                    {
                        "cause": "pfc_storm" if ok else "ecn_congestion",
                        "culprit": "switch:leaf1:Ethernet0:3",
                        "gpu_seconds_lost": 190.2,
                    }
                ],
                "detection_latency_seconds": 3.1,
                "injected_gpu_seconds": 184.0,
                "pages": [{"transition": "opened"}, {"transition": "resolved"}],
                "ok": ok,
                "reason": "matches" if ok else "expected pfc_storm, got ecn_congestion",
            },
        ],
        "gpu_seconds_by_cause": {"pfc_storm": 190.2},
    }


def test_summary_table_shows_verdicts() -> None:
    text = _text(summary_table(_summary(True)))
    assert "no incident" in text
    assert "3.1 s" in text
    assert "190 (184)" in text
    assert text.count("OK") == 2
    wrong = _text(summary_table(_summary(False)))
    assert "WRONG: expected pfc_storm" in wrong
    assert wrong.count("ecn_congestion") == 2  # reported, and named in the verdict
    narrow = _text(summary_table(_summary(True)), width=80)
    assert "switch:leaf1:Ethernet" in narrow


def test_cause_table() -> None:
    text = _text(cause_table(_summary(True)))
    assert "PFC pause storm" in text
    assert "190" in text
    empty = _text(cause_table({"gpu_seconds_by_cause": {}}))
    assert "(none)" in empty
