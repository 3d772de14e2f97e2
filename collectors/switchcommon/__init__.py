"""What the SNMP (``switch``) and gNMI (``gnmi``) switch collectors share.

Not a collector (it has no ``FACTORY`` and is not in the registry): both switch
collectors import it by these public module names.

* :mod:`.uplinks` — LLDP neighbours, and which switch ports face this node;
* :mod:`.targets` — target naming rules and the ``switch '<name>'`` source key
  that keeps SNMP and gNMI from polling the same switch twice;
* :mod:`.profiles` — reading built-in and operator vendor-profile files.

The per-port switch families both export are in :mod:`fabricwatch.signals`.
"""
