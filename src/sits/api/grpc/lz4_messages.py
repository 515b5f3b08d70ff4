"""LZ4 message compression for the gRPC door.

grpc-python can only negotiate its built-in codecs (gzip, deflate), so LZ4 rides inside the message:
a `bytes` field holds an LZ4 frame of the serialized message. Decompression is bounded, so a small
frame cannot expand into an unbounded request.
"""

from __future__ import annotations

import lz4.frame

from sits.errors import InvalidRequest, PayloadTooLarge

# Below this an answer message goes out plain: LZ4's frame header (about 15 bytes) and literal
# runs make small messages larger, not smaller (gzip's likewise).
MIN_COMPRESSED_BYTES = 1024


def compress(data: bytes) -> bytes:
    return lz4.frame.compress(data)  # level 0: the fast mode, what LZ4 is chosen for


def decompress(frame: bytes, max_bytes: int, field: str) -> bytes:
    """The payload of one LZ4 frame; raises InvalidRequest / PayloadTooLarge naming `field`."""
    decompressor = lz4.frame.LZ4FrameDecompressor()
    try:
        data = decompressor.decompress(frame, max_length=max_bytes + 1)
    except RuntimeError as exc:
        raise InvalidRequest(f"'{field}' is not an LZ4 frame: {exc}", param=field) from None
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"'{field}' expands to more than {max_bytes} bytes", param=field)
    if not decompressor.eof:
        raise InvalidRequest(f"'{field}' is a truncated LZ4 frame", param=field)
    return data
