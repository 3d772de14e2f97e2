"""systemd notification protocol without a dependency.

One ``AF_UNIX``/``SOCK_DGRAM`` datagram to ``$NOTIFY_SOCKET`` per message
(a leading ``@`` means the abstract namespace). Outside systemd every call is
a no-op.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping


class Notifier:
    """Sends sd_notify messages; a no-op when ``NOTIFY_SOCKET`` is unset."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        addr = env.get("NOTIFY_SOCKET", "")
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        self._addr = addr
        self._sock: socket.socket | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        self.watchdog_usec: int | None = None
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdog_usec = int(usec)

    @property
    def enabled(self) -> bool:
        """True when running under a service manager that listens."""
        return bool(self._addr)

    def notify(self, message: str) -> bool:
        """Send one message; return False (never raise) if it could not be sent."""
        if not self._addr:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            self._sock.sendto(message.encode(), self._addr)
        except OSError:
            return False
        return True

    def ready(self) -> bool:
        """``READY=1``: startup finished."""
        return self.notify("READY=1")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the pipeline is alive."""
        return self.notify("WATCHDOG=1")

    def reloading(self) -> bool:
        """``RELOADING=1`` with ``MONOTONIC_USEC`` (required by systemd >= 253)."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify(f"RELOADING=1\nMONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        """``STOPPING=1``: shutdown began."""
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        """Free-form ``STATUS=`` line shown by ``systemctl status``."""
        return self.notify(f"STATUS={text}")

    def close(self) -> None:
        """Close the socket."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
