"""The test suite's own helpers: a loopback proxy, `purelink serve` as a child
process, the exactly-once check, the guard on purelink's threads, and flows
sharing a bottleneck in virtual time (sharing.py)."""
