"""fabricwatch: fabric-health monitoring for GPU training clusters.

The daemon core (config, pipeline, engine, outputs, CLI) lives in this package;
the hardware-specific collectors live in :mod:`fabricwatch.collectors`.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("fabricwatch")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
