"""The examples each verb's `--help` ends with, and the overview `purelink` alone prints.

Why it exists: a command line that teaches itself.  A person who types
`purelink` or `purelink VERB --help` sees what the verb is for and a few
commands to copy; they are kept here, apart from the options' code, so they
read as one page (a test runs `--help` of every verb and checks each has them).
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXAMPLES", "OVERVIEW"]

EXAMPLES: Final = {
    "serve": """\
examples:
  purelink serve --data /var/lib/purelink
  purelink serve --data ./data --udp 127.0.0.1:7400 --tcp 127.0.0.1:7401 \\
      --metrics 127.0.0.1:9464 --retain-bytes 10G
  purelink serve --data nats://127.0.0.1:4222 --replicas 3""",
    "send": """\
examples:
  seq 1000 | purelink send udp://127.0.0.1:7400 --stream numbers
  tail -F app.log | purelink send udp://127.0.0.1:7400 --stream app-logs --producer web-1
  purelink send udp://10.0.0.1:7400,tcp://10.0.0.2:7401 --stream orders \\
      --file orders.txt --secret-file key""",
    "read": """\
examples:
  purelink read --data ./data --stream numbers
  purelink read --data ./data --stream numbers --from 100 --to 199
  purelink read --data ./data --stream app-logs --format json --follow""",
    "tail": """\
examples:
  purelink tail tcp://127.0.0.1:7401 --stream numbers
  purelink tail tcp://127.0.0.1:7401 --stream app-logs --follow --reconnect 60""",
    "streams": """\
examples:
  purelink streams --data ./data
  purelink streams --data nats://127.0.0.1:4222""",
    "demo": """\
examples:
  purelink demo
  purelink demo --records 100000 --size 200""",
    "bench": """\
examples:
  purelink bench queue
  purelink bench queue wakeups --json
  purelink bench compare""",
}
"""Per verb: the lines its --help ends with."""

OVERVIEW: Final = """\
examples:
  purelink serve --data ./data --tcp 127.0.0.1:7401     # a listener (stores in ./data)
  seq 1000 | purelink send udp://127.0.0.1:7400 --stream numbers
  purelink read --data ./data --stream numbers
  purelink demo                                         # the whole job in one command

'purelink COMMAND --help' says more about each command."""
"""What `purelink --help` (and `purelink` alone) ends with."""
