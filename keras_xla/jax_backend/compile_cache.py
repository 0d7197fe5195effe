"""JAX's persistent compile cache, set up for every compilation.

`jax_compilation_cache_dir` alone keeps only executables that took over a
second to compile and are large enough: a small model's steps would never
be kept. Here both thresholds are 0 (`jax_persistent_cache_min_compile_
time_secs`, `jax_persistent_cache_min_entry_size_bytes`), so every step
compilation is kept and a second process loads it (JAX reports a hit; the
tuner does not count it as a compilation). JAX itself reads and writes
the directory and runs what an entry holds, so, as on TensorFlow
(`core.cache_directory.untrusted`), a directory another user owns or
can write, or that holds such an entry or a link, is not used unless the
user trusts it (`trust_shared=True`).
"""

from __future__ import annotations

import os

from keras_xla.core.cache_directory import (
    CacheStatus,
    open_directory,
    refused,
    untrusted,
    untrusted_entry,
)

# JAX's cache settings, as the cache sets them and the doctor reads them.
OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


def cache_entries(directory: str) -> dict[str, float]:
    """The cache's entry files and their modification times."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    out = {}
    for name in names:
        try:
            out[name] = os.lstat(os.path.join(directory, name)).st_mtime
        except OSError:
            continue
    return out


def clear_compile_cache(directory: str) -> int:
    """Deletes JAX's entries in `directory` (its `-cache` and `-atime`
    files, `jax._src.lru_cache`'s names for an entry and its access time;
    never a link or anything else there); returns how many were removed."""
    removed = 0
    for name in cache_entries(directory):
        path = os.path.join(directory, name)
        if not name.endswith(("-cache", "-atime")) or os.path.islink(path):
            continue
        try:
            os.remove(path)
            removed += 1
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue
    return removed


def enable_compile_cache(
    directory: str, trust_shared: bool = False
) -> CacheStatus:
    """Turns on JAX's persistent compile cache for this process.

    Args:
        directory: Where entries go; created (mode 700) if missing.
        trust_shared: Use it even where another user owns or can write it,
            or it holds links. Defaults to `False`.

    Returns:
        A `CacheStatus`; `active=False` says why the cache is not used.
        Raises `ValueError` if `directory` is not a path or is a file.
    """
    directory, failed = open_directory(directory)
    if failed is not None:
        return failed
    why = None
    if not trust_shared:
        if os.path.islink(directory):
            why = "it is a link"
        why = why or untrusted(directory, True) or untrusted_entry(directory)
    existing = len(cache_entries(directory))
    if why is not None:
        return refused(directory, why, "JAX", existing)
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    for option, value in zip(OPTIONS, (directory, 0, 0)):
        jax.config.update(option, value)
    # JAX decides once per process whether the cache is used; a cache
    # directory set after that decision needs it taken again.
    compilation_cache.reset_cache()
    return CacheStatus(
        directory,
        True,
        existing,
        f"JAX persistent compile cache active in {directory} "
        f"({existing} files found).",
        persist=os.access(directory, os.W_OK),
    )
