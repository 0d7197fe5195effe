"""`import keras_xla`'s wall time where the cache home can and cannot be
written.

Each row imports keras_xla in two fresh processes, one after the other,
with XLA flags set so the import checks them, and a cache home of its
own: usable (created on the first import), a file, a read-only directory
(by its mode, or as root by `chattr +i`; skipped where neither stops
writes) and memory only (the home a file, and the private temporary
fallback planted by someone else, so nothing can be kept). The flags are
well-known ones (`--tf_xla_auto_jit=2`,
`--xla_force_host_platform_device_count=2`: checked against the built-in
table) or one outside that table (`--tf_xla_clustering_fuel=100`: checked
against TensorFlow's table, asked of TensorFlow in a child process, the
probe, where it is not kept yet). The last row is Keras's JAX backend,
where keras_xla checks no flags. Each row prints the import's seconds in
the first and second process (measured inside the process around the
import), the probe's child processes each started (two per table: one
per variable), and the cache home warnings each printed.

Run: python benchmarks/import_time.py
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

# Times the import and counts the flag-table probes it starts (a child
# process whose environment holds `--help`), letting them run.
CHILD = r"""
import json, subprocess, sys, time
probes, real = [], subprocess.Popen

def popen(args, *rest, env=None, **kwargs):
    if "--help" in (env or {}).values():
        probes.append(1)
    return real(args, *rest, env=env, **kwargs)

subprocess.Popen = popen
start = time.perf_counter()
import keras_xla
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "probes": len(probes)}))
"""
WARNING = "cannot be used"  # In the cache home's one-line warning.
WELL_KNOWN = {
    "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
}
UNUSUAL = {"TF_XLA_FLAGS": "--tf_xla_clustering_fuel=100"}


def import_once(home: str, tmp: str, flags: dict[str, str]) -> dict:
    """`import keras_xla` in a fresh process; its seconds, probes and
    warnings."""
    env = {k: v for k, v in os.environ.items() if "XLA_FLAGS" not in k}
    env.pop("KERAS_XLA_FIX_FLAGS", None)
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env.update(KERAS_XLA_CACHE_DIR=home, TMPDIR=tmp, **flags)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    out = json.loads(result.stdout.splitlines()[-1])
    out["warnings"] = result.stderr.count(WARNING)
    return out


@contextlib.contextmanager
def read_only(path: str) -> Iterator[str | None]:
    """Makes the directory `path` unwritable for this user for the block;
    yields None (and changes nothing) where that is not possible."""
    if os.geteuid() != 0:
        os.chmod(path, 0o500)
        try:
            yield path
        finally:
            os.chmod(path, 0o700)
        return
    # Root writes whatever the mode says; the immutable attribute stops it.
    if shutil.which("chattr") is None:
        yield None
        return
    done = subprocess.run(["chattr", "+i", path], capture_output=True)
    if done.returncode != 0:
        yield None
        return
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", path], check=True)


@contextlib.contextmanager
def cache_home(kind: str) -> Iterator[tuple[str | None, str]]:
    """A fresh `(home, temporary directory)` of `kind`; home None where
    `kind` cannot be made on this machine."""
    with tempfile.TemporaryDirectory(prefix="keras_xla_import_") as root:
        tmp = os.path.join(root, "tmp")
        os.mkdir(tmp)
        home = os.path.join(root, "home")
        if kind in ("a file", "memory only"):
            with open(home, "w") as f:
                f.write("not a directory")
        if kind == "memory only":
            planted = os.path.join(tmp, f"keras_xla-{os.getuid()}")
            os.mkdir(planted)
            os.chmod(planted, 0o755)  # Not private: not used.
        if kind != "read-only":
            yield home, tmp
            return
        os.mkdir(home, 0o700)
        with read_only(home) as unwritable:
            yield unwritable, tmp


def main() -> None:
    rows = [
        (kind, name, flags)
        for kind in ("usable", "a file", "read-only", "memory only")
        for name, flags in (("well-known", WELL_KNOWN), ("unusual", UNUSUAL))
    ]
    rows.append(
        ("usable (JAX)", "unusual", {"KERAS_BACKEND": "jax", **UNUSUAL})
    )
    print(
        f"{os.cpu_count()}-core {platform.machine()} CPU, Python "
        f"{platform.python_version()}, TensorFlow "
        f"{importlib.metadata.version('tensorflow')}"
    )
    print(
        f"{'cache home':<14}{'flags':<12}{'first s':>9}{'second s':>10}"
        f"{'probes':>9}{'warnings':>10}"
    )
    for kind, name, flags in rows:
        with cache_home(kind.removesuffix(" (JAX)")) as (home, tmp):
            if home is None:
                print(f"{kind:<14}{name:<12}  skipped: cannot make it here")
                continue
            runs = [import_once(home, tmp, flags) for _ in range(2)]
        first, second = runs
        print(
            f"{kind:<14}{name:<12}{first['seconds']:>9.2f}"
            f"{second['seconds']:>10.2f}"
            f"{first['probes']:>6} {second['probes']:<2}"
            f"{first['warnings']:>7} {second['warnings']}"
        )


if __name__ == "__main__":
    main()
