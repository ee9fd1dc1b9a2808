# The compiled core's names, for type checkers (src/speedups/*.c; purelink.native).
# One section per part; each part's C file sets has_<part> = True once it is built.

# crc32c.c
crc32c_hardware: int

def crc32c(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...
def crc32c_portable(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...

# ring.c

# pack.c

# ledger.c

# intake.c
