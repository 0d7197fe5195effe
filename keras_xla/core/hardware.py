"""The hardware a run is on: devices, GPU compute capability, CPU flags.

Pure Python: the backend lists its devices as `DeviceInfo`s
(`backends.device_infos()`); the CPU's flags come from /proc/cpuinfo.

Mixed-precision advice depends on it: bfloat16 is native on GPUs of compute
capability 8.0 and newer, on TPUs, and on CPUs with `avx512_bf16` or
`amx_bf16`; float16 needs a GPU (7.x and newer for tensor cores).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

# CPU flags (as in /proc/cpuinfo) of native bfloat16 dot products.
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
PROC_CPUINFO = "/proc/cpuinfo"


@dataclasses.dataclass
class DeviceInfo:
    """A device: `"CPU"`, `"GPU"` or `"TPU"`; a GPU's `(major, minor)`;
    the memory its programs can use, in bytes (None: unknown)."""

    device_type: str
    name: str = ""
    compute_capability: tuple[int, int] | None = None
    memory_bytes: int | None = None


def host_memory_bytes() -> int | None:
    """This machine's physical memory (a CPU device's), None if unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit(devices: Iterable[DeviceInfo]) -> int | None:
    """The least memory among `devices` whose memory is known: what one
    program of a step that runs on each of them can use."""
    known = [d.memory_bytes for d in devices if d.memory_bytes]
    return min(known) if known else None


def _cpuinfo_field(path: str, keys: tuple[str, ...]) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() in keys:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_flags(path: str = PROC_CPUINFO) -> frozenset[str]:
    """The CPU feature flags from /proc/cpuinfo; empty when unreadable."""
    value = _cpuinfo_field(path, ("flags", "features"))
    return frozenset(value.lower().split()) if value else frozenset()


def cpu_model(path: str = PROC_CPUINFO) -> str | None:
    """The processor's model name from /proc/cpuinfo, if readable."""
    return _cpuinfo_field(path, ("model name",))


def resolve_cpu_flags(flags: Iterable[str] | None) -> frozenset[str]:
    """`flags` lower-cased, or this machine's flags when `None`."""
    if flags is None:
        return cpu_flags()
    return frozenset(flag.lower() for flag in flags)
