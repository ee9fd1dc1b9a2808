"""Linux's UDP socket options that the socket module does not name.

UDP GSO (`UDP_SEGMENT`, Linux 4.18) and GRO (`UDP_GRO`, Linux 5.0) are
options of level `SOL_UDP` in <linux/udp.h>.  CPython's socket module exports
`SOL_UDP` but neither option (3.11 to 3.14), so their values are written here,
once, from the kernel's UAPI header, which never renumbers an option; the
socket module's own constant is taken instead the day it has one.  A kernel
without them refuses them (ENOPROTOOPT, EINVAL) and purelink falls back to a
datagram per system call (tests/link/test_fallbacks.py); tests/link/test_nogil.py fails
if this machine's kernel has them and they do not take effect.
"""

from __future__ import annotations

import socket
from typing import Final

__all__ = ["SOL_UDP", "UDP_GRO", "UDP_SEGMENT"]

SOL_UDP: Final[int] = socket.SOL_UDP
UDP_SEGMENT: Final[int] = getattr(socket, "UDP_SEGMENT", 103)
UDP_GRO: Final[int] = getattr(socket, "UDP_GRO", 104)
