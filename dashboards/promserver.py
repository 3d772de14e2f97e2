"""A real Prometheus on a loopback port, loaded with backfilled OpenMetrics.

Used by the dashboard tests and ``bench/render_dashboards.py``: the text from
:func:`dashboards.telemetry.simulate` goes through ``promtool tsdb
create-blocks-from openmetrics`` into a fresh TSDB, and ``prometheus`` serves
it on ``127.0.0.1``. Queries go over the real HTTP API.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

READY_TIMEOUT = 30.0


class PrometheusError(RuntimeError):
    """promtool or prometheus failed, or a query was rejected."""


def tools_available() -> bool:
    """Whether ``promtool`` and ``prometheus`` are on PATH."""
    return shutil.which("promtool") is not None and shutil.which("prometheus") is not None


def backfill(openmetrics: Path, tsdb: Path, *, timeout: float = 120.0) -> str:
    """``promtool tsdb create-blocks-from openmetrics``; returns promtool's report."""
    proc = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"backfill failed (rc {proc.returncode}): {proc.stderr.strip() or proc.stdout}"
        raise PrometheusError(msg)
    return proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a query result: its labels and (time, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


class PrometheusServer:
    """``prometheus`` over an existing TSDB directory, on ``127.0.0.1:<free port>``.

    Use as a context manager; the process is stopped (SIGTERM, then SIGKILL)
    on exit and its log kept in ``workdir/prometheus.log``.
    """

    def __init__(
        self,
        tsdb: Path,
        workdir: Path,
        rule_files: tuple[Path, ...] = (),
        *,
        query_timeout: float = 30.0,
    ) -> None:
        self.tsdb = tsdb
        self.query_timeout = query_timeout
        self.workdir = workdir
        self.rule_files = rule_files
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start and wait until ``/-/ready`` answers (bounded by :data:`READY_TIMEOUT`)."""
        cfg = self.workdir / "prometheus.yml"
        rules = "".join(f"  - {json.dumps(str(p))}\n" for p in self.rule_files)
        cfg.write_text(
            "global:\n  evaluation_interval: 1m\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs: []\n",
            encoding="utf-8",
        )
        self.port = _free_port()
        log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={cfg}",
                f"--storage.tsdb.path={self.tsdb}",
                "--storage.tsdb.retention.time=3650d",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                msg = f"prometheus exited with {self._proc.returncode}: {self.log()}"
                raise PrometheusError(msg)
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:  # noqa: S310 - loopback
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        msg = f"prometheus not ready after {READY_TIMEOUT} s: {self.log()}"
        raise PrometheusError(msg)

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def log(self) -> str:
        """The server's log so far (last 2,000 characters)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
        except OSError:
            return ""

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.query_timeout) as r:  # noqa: S310 - loopback
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            msg = f"query {params.get('query')!r} rejected: {exc.code} {detail}"
            raise PrometheusError(msg) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            # Refused, reset, timed out, or not JSON: the server is not usable.
            msg = f"query {params.get('query')!r} failed: {exc}"
            raise PrometheusError(msg) from exc
        if body.get("status") != "success":
            msg = f"query {params.get('query')!r} failed: {body}"
            raise PrometheusError(msg)
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """``/api/v1/query_range``: matrix result as :class:`Series`."""
        data = self._get(
            "/api/v1/query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
        )
        return [
            Series(dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]])
            for r in data["result"]
        ]

    def query(self, expr: str, at: float) -> list[Series]:
        """``/api/v1/query`` (instant): vector result as single-point :class:`Series`."""
        data = self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        if data["resultType"] == "scalar":
            t, v = data["result"]
            return [Series({}, [(float(t), float(v))])]
        return [
            Series(dict(r["metric"]), [(float(r["value"][0]), float(r["value"][1]))])
            for r in data["result"]
        ]
