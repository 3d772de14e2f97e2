"""The fleet aggregator: one page per fabric fault across many nodes.

A separate role of the same program (``fabricwatch fleet``): it consumes the
incident events node daemons publish over MQTT, groups them by shared culprit
(switch, storage target, NVLink clique, job) and time overlap into cluster
incidents, and pages through the node daemon's own outbox and sinks. Several
replicas share the work with MQTT v5 shared subscriptions and partitions
owned by rendezvous hashing. See ``docs/fleet.md``.
"""
