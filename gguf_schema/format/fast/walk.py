"""The C walk: the compiled loops over string arrays and runs of key-value pairs, and their Python fallbacks.

The optional extension ``gguf_schema.format._scan`` (``format/csrc/scan.c``) walks the body of a
string array (bounds-checked lengths; lazy marks or eager decoding) and reads runs of simple
key-value pairs. It lives beside :mod:`~gguf_schema.format.values`, whose
:class:`~gguf_schema.format.values.LazyStrings` also uses it; this module is its one binding for the
fast layer (:data:`compiled_scan`, ``None`` where it was not built or ``GGUF_SCHEMA_NO_KERNELS=1``)
and :class:`StringWalk`, the string-array reads of :class:`~gguf_schema.format.fast.arrays.ArrayItems`:
compiled where built, else the Python loops here, both raising the same errors
(:meth:`StringWalk.string_error` names the string where either stops).
"""

from __future__ import annotations

import struct
from array import array
from typing import NoReturn

from ...errors import GGUFLimitError, GGUFTruncatedError
from ...io.source import ByteReader
from ..limits import Limits
from ..nodes import where
from ..values import _U64_MAX, STRIDE, LazyStrings
from ..values import compiled_scan as compiled_scan

__all__ = ["StringWalk", "compiled_scan"]


class StringWalk:
    """The string walks of an array body whose stored length is ``self.length`` (a ``struct.Struct``)
    (big-endian when ``self.big``)."""

    length: struct.Struct
    big: bool

    def _parse_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> list[str]:
        """Decode ``n`` strings (invalid UTF-8 kept as surrogate escapes): compiled, or :meth:`walk_strings`."""
        if compiled_scan is None:
            return self.walk_strings(r, n, limits, path)
        stopped, at, items = compiled_scan.decode(
            r.data, r.pos, n, self.length.size, self.big, min(limits.max_string_length, _U64_MAX)
        )
        if items is None:
            self.string_error(r, stopped, n, at, limits.max_string_length, path)
        r.pos = at
        return items

    def _skip_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> LazyStrings:
        """Check ``n`` strings without decoding them: the lazy open's only loop; compiled, or :meth:`skip_strings`.

        Hands out a view of the strings' bytes, not a copy, and where every STRIDE-th string starts
        (the index of :class:`LazyStrings`).
        """
        if compiled_scan is None:
            end, marks = self.skip_strings(r, n, limits, path)
        else:
            stopped, end, found = compiled_scan.skip(
                r.data,
                r.pos,
                n,
                self.length.size,
                self.big,
                min(limits.max_string_length, _U64_MAX),
                STRIDE,
            )
            if found is None:
                self.string_error(r, stopped, n, end, limits.max_string_length, path)
            marks = array("Q")
            marks.frombytes(found)
        raw = memoryview(r.data)[r.pos : end]
        r.pos = end
        return LazyStrings(raw, n, self.length.format, marks)

    def walk_strings(self, r: ByteReader, n: int, limits: Limits, path: str, decode: bool = True) -> list[str]:
        """The Python walk: decode ``n`` strings (``decode=False`` only checks them); the reference of the compiled one."""
        lsize = self.length.size
        data, pos, size, unpack = r.data, r.pos, r.size, self.length.unpack_from
        cap = limits.max_string_length
        out = [""] * n
        for i in range(n):
            if pos + lsize > size:
                self.string_error(r, i, n, pos, cap, path)
            (ln,) = unpack(data, pos)
            start = pos + lsize
            if start + ln > size or ln > cap:
                self.string_error(r, i, n, pos, cap, path)
            pos = start + ln
            if decode:
                out[i] = str(data[start:pos], "utf-8", "surrogateescape")
        r.pos = pos
        return out

    def skip_strings(self, r: ByteReader, n: int, limits: Limits, path: str) -> tuple[int, array[int]]:
        """The Python length-only walk: where ``n`` strings end and the marks; the reference of the compiled one.

        The fast loop checks nothing per string; when the strings run past the buffer or all of
        them together exceed ``limits.max_string_length`` (so one alone might), :meth:`walk_strings`
        walks them again and names the first that fails, exactly as an eager parse does.
        """
        lsize = self.length.size
        data, start, unpack = r.data, r.pos, self.length.unpack_from
        marks, pos = array("Q"), start
        try:
            for _ in range(n // STRIDE):  # this loop is the whole cost of a lazy open without the compiled walk
                marks.append(pos - start)
                for _ in range(STRIDE // 4):
                    pos += unpack(data, pos)[0] + lsize
                    pos += unpack(data, pos)[0] + lsize
                    pos += unpack(data, pos)[0] + lsize
                    pos += unpack(data, pos)[0] + lsize
            if n % STRIDE:
                marks.append(pos - start)
                for _ in range(n % STRIDE):
                    pos += unpack(data, pos)[0] + lsize
            marks.append(pos - start)
        except (struct.error, OverflowError):  # past the end, or a length past anything an offset can be
            pos = r.size + 1
        if pos > r.size or pos - start - n * lsize > limits.max_string_length:
            self.walk_strings(r, n, limits, path, decode=False)  # raises for the first string that fails
            r.pos = start
        return pos, marks

    def string_error(self, r: ByteReader, i: int, n: int, at: int, cap: int, path: str) -> NoReturn:
        """Raise the error for string ``i`` of ``n``, whose length field starts at ``at``: where both walks stop."""
        lsize = self.length.size
        if at + lsize > r.size:
            raise GGUFTruncatedError(
                f"file ends inside the length of string {i} of {n}", offset=at, path=where(f"{path}[{i}]")
            )
        (ln,) = self.length.unpack_from(r.data, at)
        if ln > cap:
            raise GGUFLimitError(
                f"string of {ln:,} bytes exceeds max_string_length = {cap:,}",
                offset=at,
                path=where(f"{path}[{i}]"),
                value=ln,
            )
        raise GGUFTruncatedError(
            f"string length {ln:,} needs {ln:,} bytes, {max(0, r.size - at - lsize):,} left",
            offset=at,
            path=where(f"{path}[{i}]"),
            value=ln,
        )
