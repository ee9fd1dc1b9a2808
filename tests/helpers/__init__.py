"""The test suite's own helpers: a loopback proxy, `purelink serve` as a child
process, the exactly-once check, and the guard on purelink's threads."""
