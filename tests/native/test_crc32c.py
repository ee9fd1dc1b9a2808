"""The compiled core's CRC-32C is the crc32c package's function, every way it computes.

Why: the packer and the intake of the compiled core checksum pieces and
batches in C; a difference from the pure path's checksum would make one
side drop every datagram of the other.
"""

from __future__ import annotations

import crc32c as reference
import pytest
from hypothesis import given
from hypothesis import strategies as st

from purelink import native

speedups = native.compiled
pytestmark = pytest.mark.skipif(speedups is None, reason=native.reason or "pure Python")


def test_check_value() -> None:
    assert speedups is not None
    assert speedups.crc32c(b"123456789") == 0xE3069283
    assert speedups.crc32c_portable(b"123456789") == 0xE3069283
    assert speedups.crc32c(b"") == 0


@given(st.binary(max_size=4096), st.integers(0, 2**32 - 1), st.integers(0, 7))
def test_same_as_the_package(data: bytes, value: int, offset: int) -> None:
    assert speedups is not None
    view = memoryview(data)[offset:]  # every alignment of the start
    want = reference.crc32c(bytes(view), value)
    assert speedups.crc32c(view, value) == want
    assert speedups.crc32c_portable(view, value) == want


def test_continues_from_a_value() -> None:
    assert speedups is not None
    data = bytes(range(256)) * 40
    whole = speedups.crc32c(data)
    assert speedups.crc32c(data[1000:], speedups.crc32c(data[:1000])) == whole


def test_large_buffers_let_other_threads_run() -> None:
    assert speedups is not None
    data = bytes(range(256)) * 4096  # 1 MiB: over the size that releases the GIL
    assert speedups.crc32c(bytearray(data)) == reference.crc32c(data)


def test_bad_arguments_are_type_errors() -> None:
    assert speedups is not None
    with pytest.raises(TypeError):
        speedups.crc32c("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        speedups.crc32c()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        speedups.crc32c(b"", 0, 1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "size",
    [383, 384, 385, 3 * 128 * 2 + 7, 3 * 4096 - 1, 3 * 4096, 3 * 4096 + 1, 3 * 4096 * 5 + 391],
)
@pytest.mark.parametrize("offset", [0, 3])
def test_three_blocks_side_by_side_join_right(size: int, offset: int) -> None:
    """Around the sizes where the hardware way checksums three blocks at once."""
    assert speedups is not None
    data = bytes((i * 131 + 7) & 0xFF for i in range(size + offset))[offset:]
    want = reference.crc32c(data, 0x1234)
    assert speedups.crc32c(data, 0x1234) == want
    assert speedups.crc32c_portable(data, 0x1234) == want
