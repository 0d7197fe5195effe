"""Which flags the installed TensorFlow accepts, and their types.

A child run with `VAR=--help` prints the usage (names, types) and dies.
absl cuts it at 15,000 bytes: all of `TF_XLA_FLAGS`, part of `XLA_FLAGS`,
whose other names are read from the shared library that defines them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import logging
import mmap
import os
import re
import subprocess
import sys

from keras_xla.core import cache_home, json_files

logger = logging.getLogger(__name__)

VARIABLES = ("TF_XLA_FLAGS", "XLA_FLAGS")
_USAGE = re.compile(r"^\t--(\w+)=.*?\t(int32|int64|bool|string|float)\t", re.M)
_PROBE = """import json, os, sys, tensorflow as tf
lib = tf.sysconfig.get_lib()
libs = [os.path.join(lib, f[3:])
        for f in tf.sysconfig.get_link_flags() if f[:3] == "-l:"]
sys.stdout.write(json.dumps(libs) + "\\n")
sys.stdout.flush()
tf.function(jit_compile=True)(lambda x: x * 2.0)(tf.constant(1.0))"""


def _by_type(**names: str) -> dict[str, str]:
    """`{flag: parser type}` from each type's flags, space-separated."""
    return {
        flag: kind for kind, flags in names.items() for flag in flags.split()
    }


# The flags people set most, with their parser types (as TensorFlow 2.21
# prints them; `tests/test_flags.py` checks each against the installed
# TensorFlow's table). Only flags that have kept their name and type for
# years: a name TensorFlow dropped would pass here and abort TensorFlow.
# A variable whose flags are all here is checked at import without the
# probe (seconds); where TensorFlow cannot be asked, this is the table.
WELL_KNOWN: dict[str, dict[str, str]] = {
    "TF_XLA_FLAGS": _by_type(
        bool="tf_mlir_enable_mlir_bridge tf_xla_always_defer_compilation"
        " tf_xla_async_compilation tf_xla_clustering_debug"
        " tf_xla_compile_on_demand tf_xla_cpu_global_jit"
        " tf_xla_deterministic_cluster_names tf_xla_enable_lazy_compilation"
        " tf_xla_enable_xla_devices tf_xla_persistent_cache_read_only",
        string="tf_xla_auto_jit tf_xla_cluster_exclude_ops"
        " tf_xla_ops_to_cluster tf_xla_persistent_cache_device_types"
        " tf_xla_persistent_cache_directory tf_xla_persistent_cache_prefix",
        int32="tf_xla_max_cluster_size tf_xla_min_cluster_size",
    ),
    "XLA_FLAGS": _by_type(
        int32="xla_backend_optimization_level xla_dump_max_hlo_modules"
        " xla_force_host_platform_device_count xla_gpu_autotune_level",
        bool="xla_cpu_enable_fast_math xla_cpu_multi_thread_eigen"
        " xla_dump_fusion_visualization xla_dump_hlo_as_dot"
        " xla_dump_hlo_as_html xla_dump_hlo_as_proto xla_dump_hlo_as_text"
        " xla_dump_include_timestamp xla_dump_large_constants"
        " xla_gpu_strict_conv_algorithm_picker xla_hlo_profile"
        " xla_llvm_disable_expensive_passes",
        string="xla_disable_hlo_passes xla_dump_hlo_module_re"
        " xla_dump_hlo_pass_re xla_dump_to xla_gpu_cuda_data_dir",
    ),
}


@dataclasses.dataclass(frozen=True)
class FlagTable:
    types: dict[str, str | None]  # Name -> parser type (None: not known).
    complete: bool  # Whether a name missing from `types` is truly unknown.


def well_known() -> dict[str, FlagTable]:
    """Both variables' built-in tables (`WELL_KNOWN`): no probe, and
    incomplete (a name missing from them may exist)."""
    return {v: FlagTable(dict(WELL_KNOWN[v]), False) for v in VARIABLES}


def _library_names(paths: list[str], usage: set[str]) -> set[str]:
    for path in paths:
        with (
            open(path, "rb") as f,
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            # Flag names are NUL-terminated literals, not identifier tails.
            names = {
                m.group()[:-1].decode()
                for m in re.finditer(rb"xla_[a-z0-9_]+\x00", data)
                if data[m.start() - 1] == 0
            }
        if usage <= names:  # The library that defines the flags.
            return names
    return set()


def start_probe(variable: str) -> subprocess.Popen:
    # The child sees `variable=--help` and none of the caller's flags.
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update({variable: "--help", "TF_CPP_MIN_LOG_LEVEL": "3"})
    env["CUDA_VISIBLE_DEVICES"] = ""
    command, pipe = [sys.executable, "-c", _PROBE], subprocess.PIPE
    return subprocess.Popen(
        command, env=env, stdout=pipe, stderr=pipe, text=True, errors="replace"
    )


def read_probe(variable: str, child: subprocess.Popen) -> FlagTable:
    try:
        out, err = child.communicate(timeout=300)
        usage = dict(_USAGE.findall(err))
        if not usage:
            raise RuntimeError(err[-500:] or "no flag usage printed")
        message = err[err.find("Flags:\n") :]
        if "\n\n" in message and len(message) < 14_000:  # Not cut by absl.
            return FlagTable(usage, True)
        names = _library_names(json.loads(out.splitlines()[0]), set(usage))
        return FlagTable({**dict.fromkeys(names), **usage}, bool(names))
    except Exception as error:  # Diagnostics never raise.
        child.kill()
        logger.warning("Cannot read %s flags (%s).", variable, error)
        return FlagTable(dict(WELL_KNOWN[variable]), False)


TABLES_FILE = "flag_tables.json"


@functools.cache  # One TensorFlow per process.
def tables() -> dict[str, FlagTable]:
    """Both variables' tables: from the machine's cache for this
    TensorFlow, else asked of TensorFlow (a few seconds) and kept."""
    key = _tensorflow_key()
    cached = _load(key)
    if cached is not None:
        return cached
    children = {v: start_probe(v) for v in VARIABLES}  # Both at once.
    found = {v: read_probe(v, child) for v, child in children.items()}
    if all(t.complete for t in found.values()):
        _store(key, found)
    return found


def _tensorflow_key() -> str | None:
    """The installed TensorFlow (where and which), without importing it."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.origin:
        return None
    try:
        stamp = os.path.getmtime(spec.origin)
    except OSError:
        return None
    return f"{spec.origin}@{stamp}"


def _path() -> str:
    return os.path.join(cache_home.directory(), TABLES_FILE)


def _load(key: str | None) -> dict[str, FlagTable] | None:
    try:
        entry = json_files.read_object(_path())[key]
        return {v: FlagTable(entry[v]["types"], True) for v in VARIABLES}
    except (KeyError, TypeError):
        return None


def _store(key: str | None, found: dict[str, FlagTable]) -> None:
    if key is None:
        return
    origin = key.rsplit("@", 1)[0]

    def change(data: dict) -> None:
        # One entry per TensorFlow install: this one's earlier stamps go.
        for old in [k for k in data if k.rsplit("@", 1)[0] == origin]:
            del data[old]
        data[key] = {v: {"types": t.types} for v, t in found.items()}

    try:
        json_files.update(_path(), change)
    except OSError as error:
        cache_home.cannot_keep("the XLA flag tables", error)
