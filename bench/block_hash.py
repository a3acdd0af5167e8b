"""Cost of hashing one new prefix-cache block (``sha256_cbor``), cbor2 against pure Python.

    .venv/bin/python bench/block_hash.py [--blocks 20000] [--block-size 16]

Hashes ``--blocks`` distinct blocks shaped as vLLM hashes them: ``(parent digest, block
token ids, extra keys)`` with the tenant salt as block 0's extra key. Measured: the
project's ``workers.engine.hashing.sha256_cbor`` (``cbor2.dumps(x, canonical=True)``, the
call vLLM makes). Baseline: a pure-Python canonical CBOR encoder for the same shapes (what
the project used before cbor2); the bytes are checked equal before timing. Ends with one
``RESULT`` line.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
import time

from workers.engine.hashing import cbor_encode, sha256_cbor


def _head(major: int, value: int) -> bytes:
    if value < 24:
        return bytes([(major << 5) | value])
    for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if value < 1 << (8 * struct.calcsize(fmt)):
            return bytes([(major << 5) | extra]) + struct.pack(fmt, value)
    raise OverflowError(value)


def python_cbor(obj) -> bytes:
    """Canonical CBOR of None, non-negative ints, bytes, str and tuples (the baseline)."""
    if obj is None:
        return b"\xf6"
    if isinstance(obj, int):
        return _head(0, obj)
    if isinstance(obj, bytes):
        return _head(2, len(obj)) + obj
    if isinstance(obj, str):
        data = obj.encode()
        return _head(3, len(data)) + data
    return _head(4, len(obj)) + b"".join(python_cbor(x) for x in obj)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=20_000)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    size = args.block_size
    inputs = [
        (os.urandom(32), tuple(range(i * size, (i + 1) * size)), ("tenant-salt",) if i else None)
        for i in range(args.blocks)
    ]
    assert all(python_cbor(x) == cbor_encode(x) for x in inputs[:100])

    def per_block_us(fn) -> float:
        start = time.perf_counter()
        for x in inputs:
            fn(x)
        return (time.perf_counter() - start) / len(inputs) * 1e6

    cbor2_us = min(per_block_us(sha256_cbor) for _ in range(3))
    python_us = min(
        per_block_us(lambda x: hashlib.sha256(python_cbor(x)).digest()) for _ in range(3)
    )
    print(f"cbor2 (canonical)   {cbor2_us:8.2f} us per new block")
    print(f"pure-Python encoder {python_us:8.2f} us per new block")
    print(
        f"RESULT blocks={args.blocks} block_size={size} cbor2_us={cbor2_us:.2f} "
        f"python_us={python_us:.2f} ratio={python_us / cbor2_us:.2f}"
    )


if __name__ == "__main__":
    main()
