"""The sending side: `Link` and `connect`, the link's thread, its hand-off ring, transports.

A record's way out: `Link.queue` (link.py) puts it on the hand-off ring
(ring.py) and wakes the link's thread only when it sleeps; the thread
(thread.py) hands it to the sans-IO sender (`purelink.protocol.sender`) and
moves the sender's datagrams through a transport (transport.py: UDP with GSO,
or TCP frames; nogil.py: the socket calls that keep the GIL).  stats.py holds
what a link counts and the checks of `connect`'s arguments.
"""

from .link import Link, connect, connect_async
from .stats import LinkStats

__all__ = ["Link", "LinkStats", "connect", "connect_async"]
