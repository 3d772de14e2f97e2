"""``fabricwatch demo``: the real daemon pipeline on a simulated GPU node.

:mod:`.scenarios` defines the faults and their ground truth, :mod:`.node` the
simulated hardware and the collector registry over it, :mod:`.runner` the
run, :mod:`.view` the terminal output, :mod:`.summary` the verdict and
:mod:`.cli` the command.
"""
