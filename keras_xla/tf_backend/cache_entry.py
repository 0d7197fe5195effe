"""One XLA persistent-cache entry: its bytes, in TensorFlow's in-memory
file system (`ram://`) or on disk, and the HLO modules inside.

An entry is an `XlaSerializedCacheEntry`: field 2 the unoptimized
`HloModuleProto`, field 3 the serialized executable (the CPU's and the
GPU's `CompilationResultProto`), whose field 1.1 is the optimized
`HloModuleProto` XLA ran and field 2 its `BufferAssignmentProto`: the
program's buffers (field 3, each `BufferAllocationProto`'s size in its
field 2, a thread-local one flagged in field 3). It is parsed at the wire
level, with no protobuf class of TensorFlow's. A file on disk is read
without following a link.
"""

from __future__ import annotations

import contextlib
import os

MEMORY = "ram://"


def in_memory(directory: str | None) -> bool:
    """Whether `directory` is in TensorFlow's in-memory file system."""
    return bool(directory) and directory.startswith(MEMORY)


def read_bytes(path: str) -> bytes:
    """An entry's bytes; a file on disk is read without following a
    symbolic link. Raises `OSError`."""
    if in_memory(path):
        from tensorflow.python.lib.io import file_io

        try:
            return file_io.read_file_to_string(path, binary_mode=True)
        except Exception as error:  # noqa: BLE001 - TF's own errors
            raise OSError(f"cannot read {path}: {error}") from error
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    """Writes an in-memory entry. Raises `OSError`."""
    from tensorflow.python.lib.io import file_io

    try:
        file_io.recursive_create_dir_v2(path.rsplit("/", 1)[0])
        file_io.atomic_write_string_to_file(path, data)
    except Exception as error:  # noqa: BLE001 - TF's own errors
        raise OSError(f"cannot write {path}: {error}") from error


def size(path: str) -> int:
    """An entry's size in bytes (0 if it is gone)."""
    with contextlib.suppress(Exception):  # removed meanwhile
        if in_memory(path):
            from tensorflow.python.lib.io import file_io

            return file_io.stat(path).length
        return os.lstat(path).st_size
    return 0


def remove(path: str) -> None:
    """Removes an entry; one that is already gone is fine."""
    with contextlib.suppress(Exception):  # removed meanwhile
        if in_memory(path):
            from tensorflow.python.lib.io import file_io

            file_io.delete_file_v2(path)
        else:
            os.remove(path)


def _fields(data: bytes) -> dict[int, list]:
    """Top-level fields of a protobuf message: number -> values (bytes for
    length-delimited fields, ints for varints)."""
    out: dict[int, list] = {}
    i, n = 0, len(data)
    while i < n:
        key, i = _varint(data, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _varint(data, i)
        elif kind == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
            if i > n:
                raise ValueError("truncated protobuf message")
        elif kind in (1, 5):  # Fixed 64 or 32 bits.
            width = 8 if kind == 1 else 4
            value, i = data[i : i + width], i + width
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        out.setdefault(number, []).append(value)
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, i
        shift += 7


def parse_modules(data: bytes, path: str = "entry") -> tuple[bytes, bytes]:
    """The serialized `(unoptimized, optimized)` `HloModuleProto`s of an
    entry's bytes; `ValueError` if they are not an entry."""
    top = _fields(data)
    try:
        unoptimized = top[2][0]
        executable = _fields(top[3][0])
        optimized = _fields(executable[1][0])[1][0]
    except (KeyError, IndexError, TypeError) as error:
        raise ValueError(f"{path} is not an XLA cache entry") from error
    return unoptimized, optimized


def program_bytes(data: bytes) -> int | None:
    """The memory XLA assigned the program of an entry's bytes: the sum
    of its buffer allocations (arguments, outputs, temporaries; not the
    thread-local ones), None where the entry has no buffer assignment."""
    try:
        executable = _fields(_fields(data)[3][0])
        allocations = _fields(executable[2][0]).get(3, [])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    fields = [_fields(allocation) for allocation in allocations]
    total = sum(f.get(2, [0])[0] for f in fields if not f.get(3, [0])[0])
    return total or None


def read_modules(path: str) -> tuple[bytes, bytes]:
    """`parse_modules` of the entry at `path`; `OSError` if it cannot be
    read."""
    return parse_modules(read_bytes(path), path)
