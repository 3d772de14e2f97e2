"""Test doubles shipped with fabricwatch, as ``structlog.testing`` ships its own.

Simulated switches, GPUs, NICs, storage and whole-node fault scenarios live
here, apart from the product code: the tests, the benchmarks and
``fabricwatch demo`` import them. The daemon imports one only when told to:
the GPU collector with ``backend = "simulated"`` runs on :mod:`.sim_gpu`.
"""
