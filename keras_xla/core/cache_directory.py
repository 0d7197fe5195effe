"""The persistent compile cache's directory: checked before a backend uses it.

TensorFlow and JAX both run what a cache entry holds, so an entry planted
by someone else under the key of the user's step would run in place of
it. Either backend therefore uses a directory only if this user could
have written it alone: owned by this user and writable by no one else
(`untrusted()`), unless the user said they trust a shared directory
(`trust_shared=True`). The checks, the `CacheStatus` either backend
returns, its report section and its findings are the same on both; how
entries are written and served is each backend's own
(`tf_backend.compile_cache`, `jax_backend.compile_cache`).

Pure logic: nothing here imports TensorFlow, Keras or JAX.
"""

from __future__ import annotations

import dataclasses
import os
import stat

from keras_xla.core import findings
from keras_xla.core.report import CompileCacheSection


@dataclasses.dataclass(frozen=True)
class CacheStatus:
    """Whether the persistent cache is in force for this process.

    Attributes:
        directory: The cache directory.
        active: Whether a compilation now writes entries there.
        entries: Entries found when the cache was enabled.
        message: One sentence saying what was found and what to do.
        live: Where TensorFlow writes its entries, when that is not
            `directory` (the cache is mirrored through the ledger's).
        persist: Whether new entries are saved to `directory`.
        set_aside: Corrupt entries renamed `<name>.corrupt`.
        left_out: `(name, why)` of entries not loaded: written by someone
            else, links, or damaged.
        untrusted: Whether the directory was not used because another
            user owns it or can write it.
    """

    directory: str
    active: bool
    entries: int
    message: str
    live: str = ""
    persist: bool = True
    set_aside: tuple[str, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    untrusted: bool = False

    @property
    def live_directory(self) -> str:
        return self.live or self.directory


def untrusted(path: str, directory: bool = False) -> str | None:
    """Why `path` may hold what another user wrote, or None: not owned by
    this user, or writable by group or others. A directory's link is
    followed (the user named it); a file's is not."""
    try:
        info = os.stat(path) if directory else os.lstat(path)
    except OSError as error:
        return f"it cannot be read ({error.strerror})"
    if info.st_uid != os.getuid():
        return f"it is owned by another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"other users can write it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def untrusted_entry(directory: str) -> str | None:
    """Why one of the directory's files may be another user's (a link,
    or `untrusted()`), or None."""
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return f"its entry {name} is a link"
        except OSError:
            continue
        why = untrusted(path)
        if why is not None:
            return f"its entry {name}: {why}"
    return None


def open_directory(directory: str) -> tuple[str, CacheStatus | None]:
    """The cache directory the user passed as an absolute path, created
    (mode 700) if missing, and None or, where it cannot be created, an
    inactive status. Raises `ValueError` if it is not a path or is a
    file."""
    if not isinstance(directory, (str, os.PathLike)) or not str(directory):
        raise ValueError(
            f"Unsupported value `compile_cache={directory!r}`: pass a "
            "directory path."
        )
    directory = os.path.abspath(os.fspath(directory))
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(
            f"Unsupported value `compile_cache={directory!r}`: that is a "
            "file, not a directory. Pass a directory path (created if "
            "missing)."
        )
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as error:
        return directory, CacheStatus(
            directory,
            False,
            0,
            f"The compile cache directory {directory} cannot be created "
            f"({type(error).__name__}: {error}); training runs without it.",
        )
    return directory, None


def refused(
    directory: str, why: str, runtime: str, entries: int = 0
) -> CacheStatus:
    """The inactive status of a directory not used because of `why`
    (what `untrusted()`, or a backend's own check, found); `runtime` runs
    the entries ("TensorFlow", "JAX")."""
    return CacheStatus(
        directory,
        False,
        entries,
        f"The compile cache directory {directory} is not used: {why}. "
        f"{runtime} runs what a cache entry holds, so an entry another "
        "user wrote there would run in place of your step.",
        untrusted=True,
    )


def start_section(status: CacheStatus) -> CompileCacheSection:
    """The report's `compile_cache` section at the start of a fit."""
    return CompileCacheSection(
        directory=status.directory,
        active=status.active,
        entries_at_start=status.entries,
    )


def status_findings(
    status: CacheStatus, inactive_fix: str
) -> list[tuple[str, str, str]]:
    """`(code, message, fix)` for a cache that is not used because it is
    untrusted, is not in force (`inactive_fix` says what to do), or
    cannot save new entries; empty when it is in force."""
    if status.untrusted:
        code = findings.COMPILE_CACHE_UNTRUSTED
        fix = (
            f"Use a directory only you can write (chmod go-w "
            f"{status.directory}), or pass "
            "XLATuner(trust_shared_cache=True) if you trust everyone "
            "who can write it."
        )
    elif not status.active:
        code, fix = findings.COMPILE_CACHE_INACTIVE, inactive_fix
    elif not status.persist:
        code = findings.COMPILE_CACHE_READ_ONLY
        fix = f"Make {status.directory} writable to save new entries."
    else:
        return []
    return [(code, status.message, fix)]
