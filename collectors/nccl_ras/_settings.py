"""Settings of the nccl_ras collector (``[collectors.nccl_ras]``)."""

from __future__ import annotations

from dataclasses import dataclass

from fabricwatch.collector import CollectorSettings
from fabricwatch.settings import option


@dataclass(kw_only=True)
class RasSettings(CollectorSettings):
    """``[collectors.nccl_ras]``: where the local NCCL processes answer RAS clients."""

    address: str = option("127.0.0.1:28028", "NCCL_RAS_ADDR of the jobs (host:port).")
    query_timeout: float = option(
        5.0,
        "RAS collective timeout sent with each query (TIMEOUT), seconds.",
        min=0.1,
        max=600.0,
        duration=True,
    )
    interval: float = option(
        30.0, "Seconds between status queries.", min=1.0, max=3600.0, duration=True
    )
    timeout: float = option(
        20.0, "Cancel a query still running after this long.", min=0.5, max=3600.0, duration=True
    )

    def validate(self) -> None:
        """``address`` is host:port."""
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            msg = f"address must be host:port, got {self.address!r}"
            raise ValueError(msg)
