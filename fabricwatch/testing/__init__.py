"""Test doubles shipped with fabricwatch, as ``structlog.testing`` ships its own.

Simulated switches, GPUs, NICs, storage and whole-node fault scenarios live
here, apart from the product code: the tests, the benchmarks and
``fabricwatch demo`` import them; the daemon never does.
"""
