"""The reference floor for opening a GGUF file: a plain ``struct.unpack_from`` loop over an mmap.

Decodes every metadata value to Python objects (strings to ``str``, numeric arrays through one
``unpack_from`` each) and every tensor info; no checks, no schema. Written for the benchmark
only: it is the speed a hand-written parser gets, which the schema is measured against.
"""

from __future__ import annotations

import mmap
import struct

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def open_floor(path: str) -> tuple[dict, list]:
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    u32, u64 = struct.Struct("<I").unpack_from, struct.Struct("<Q").unpack_from
    pos = 8
    (n_tensors,), (n_kv,) = u64(mm, pos), u64(mm, pos + 8)
    pos += 16

    def string(pos):
        (n,) = u64(mm, pos)
        return mm[pos + 8 : pos + 8 + n].decode("utf-8", "surrogateescape"), pos + 8 + n

    def value(vt, pos):
        if vt == 8:
            return string(pos)
        if vt == 9:
            (et,), (n,) = u32(mm, pos), u64(mm, pos + 4)
            pos += 12
            if et in _SCALARS:
                fmt = f"<{n}{_SCALARS[et]}"
                return list(struct.unpack_from(fmt, mm, pos)), pos + struct.calcsize(fmt)
            out = []
            for _ in range(n):
                v, pos = value(et, pos)
                out.append(v)
            return out, pos
        fmt = "<" + _SCALARS[vt]
        return struct.unpack_from(fmt, mm, pos)[0], pos + struct.calcsize(fmt)

    metadata = {}
    for _ in range(n_kv):
        key, pos = string(pos)
        (vt,) = u32(mm, pos)
        metadata[key], pos = value(vt, pos + 4)
    tensors = []
    for _ in range(n_tensors):
        name, pos = string(pos)
        (nd,) = u32(mm, pos)
        dims = struct.unpack_from(f"<{nd}Q", mm, pos + 4)
        pos += 4 + 8 * nd
        (t,), (off,) = u32(mm, pos), u64(mm, pos + 4)
        pos += 12
        tensors.append((name, dims, t, off))
    return metadata, tensors
