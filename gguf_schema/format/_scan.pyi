# Types of the compiled module built from csrc/scan.c; absent when built without a C compiler.
# `data` is anything with the buffer protocol (bytes, mmap, memoryview).
from typing import Any

def skip(
    data: Any, pos: int, count: int, length_size: int, big_endian: bool, max_length: int, stride: int, /
) -> tuple[int, int, bytes | None]: ...
def decode(
    data: Any, pos: int, count: int, length_size: int, big_endian: bool, max_length: int, /
) -> tuple[int, int, list[str] | None]: ...
def invalid_utf8(
    data: Any, pos: int, count: int, length_size: int, big_endian: bool, max_length: int, /
) -> list[int]: ...
def pairs(
    data: Any,
    pos: int,
    count: int,
    length_size: int,
    big_endian: bool,
    max_key_length: int,
    max_string_length: int,
    types: tuple[Any, ...],
    field: type,
    boolbyte: type,
    /,
) -> tuple[list[Any], list[int], int, int]: ...
