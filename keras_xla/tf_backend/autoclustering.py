"""Auto-clustering: is it asked for, is it on, and what did it compile?

"Enable XLA globally" means auto-clustering: `tf.config.optimizer.
set_jit(True)` or `TF_XLA_FLAGS=--tf_xla_auto_jit=1|2|fusible`. TensorFlow
then cuts clusters out of the (non-XLA) step graph and compiles each one
for every shape it meets. Measured on TF 2.21 (CPU, against the profiler):

- On a CPU it acts only with `--tf_xla_cpu_global_jit` in `TF_XLA_FLAGS`;
  on a GPU `set_jit` alone takes effect.
- A non-zero `--tf_xla_auto_jit` overrides `set_jit` both ways (`-1` keeps
  it off after `set_jit(True)`); `0` or no flag defers to `set_jit`.
- `get_jit()` reads `set_jit` only (`"autoclustering"` or `""`), never
  the flag.
- Each cluster compiles once per shape, lazily: a shape's first run takes
  TensorFlow's ordinary path and it compiles at its second.
- Under `jit_compile=True` the step is one XLA cluster already, and
  auto-clustering adds nothing (the same compilations as without it).

Compilations are counted from the compile ledger (`compile_ledger`), one
entry per cluster compiled.
"""

from __future__ import annotations

import dataclasses
import re

from keras_xla.core import findings
from keras_xla.core.report import ClusteringSection
from keras_xla.tf_backend import cache_entry, compile_ledger
from keras_xla.tf_backend import flags as flags_lib

ON_VALUES = ("1", "2", "fusible")


@dataclasses.dataclass(frozen=True)
class AutoClustering:
    """What auto-clustering does in this process.

    Attributes:
        requested: Whether `set_jit` or `--tf_xla_auto_jit` asks for it.
        active: Whether it really acts on this machine.
        source: What asked for it (or kept it off), in words.
        reason: Why it is inactive when requested; else empty.
    """

    requested: bool
    active: bool
    source: str
    reason: str = ""


def detect(
    environ=None, set_jit: str | None = None, gpus: int | None = None
) -> AutoClustering:
    """Auto-clustering's state from `TF_XLA_FLAGS` (as the user set it),
    `tf.config.optimizer.get_jit()` and the devices.

    Args:
        environ: The environment; defaults to the user's (without the
            compile ledger's own flag).
        set_jit: `get_jit()`'s value; read from TensorFlow if None.
        gpus: Visible GPUs; counted if None.
    """
    import tensorflow as tf

    if environ is None:
        environ = compile_ledger.user_environment()
    if set_jit is None:
        set_jit = tf.config.optimizer.get_jit()
    if gpus is None:
        gpus = len(tf.config.list_logical_devices("GPU"))
    flags = {
        f.name: f.value
        for f in flags_lib.parse_flags(environ.get("TF_XLA_FLAGS") or "")
    }
    auto_jit = flags.get("tf_xla_auto_jit")  # check_flags reports bad ones
    if auto_jit in ON_VALUES:
        requested, source = True, f"`--tf_xla_auto_jit={auto_jit}`"
    elif auto_jit == "-1":
        requested = False
        source = "`--tf_xla_auto_jit=-1` (it overrides set_jit)"
    else:
        requested = set_jit == "autoclustering"
        source = (
            "`tf.config.optimizer.set_jit(True)`" if requested else "not asked"
        )
    global_jit = flags.get("tf_xla_cpu_global_jit", "false")
    cpu_global = global_jit in (None, "true", "1", "True")
    if not requested:
        return AutoClustering(False, False, source)
    if gpus or cpu_global:
        return AutoClustering(True, True, source)
    return AutoClustering(
        True,
        False,
        source,
        "on a machine without a GPU, auto-clustering acts only with "
        "`--tf_xla_cpu_global_jit` in TF_XLA_FLAGS",
    )


def settle(
    jit_on: bool, reason: str = "", auto: AutoClustering | None = None
) -> tuple[ClusteringSection, str, tuple[str, str, str] | None]:
    """What the fit compiles with: the report's `clustering` section, the
    jit `reason` with auto-clustering's part added, and a finding or None.
    `auto` defaults to `detect()`."""
    auto = auto or detect()
    ledger = compile_ledger.status()
    mode, note, finding = "off", "", None
    if jit_on:
        mode = "jit_compile"
        if auto.requested:
            note = (
                f" Auto-clustering is asked for too ({auto.source}); "
                "jit_compile wins: the whole step is one XLA cluster, and "
                "auto-clustering adds nothing to it."
            )
    elif auto.requested and not auto.active:
        finding = (
            findings.AUTO_CLUSTERING_INACTIVE,
            f"Auto-clustering is asked for ({auto.source}) but does "
            f"nothing: {auto.reason}.",
            "Set TF_XLA_FLAGS=--tf_xla_cpu_global_jit before starting "
            "Python, or compile the step with XLA "
            "(XLATuner(jit_compile=True)).",
        )
    elif auto.active:
        mode = "auto-clustering"
        note = (
            f" Auto-clustering is on ({auto.source}): TensorFlow compiles "
            "clusters of the step with XLA."
        )
        if ledger.directory is None:
            finding = (
                findings.AUTO_CLUSTERING_UNCOUNTED,
                "Auto-clustering's compilations cannot be counted in this "
                f"process: {ledger.reason}.",
                "Import keras_xla before TensorFlow runs its first op.",
            )
    section = ClusteringSection(mode, **dataclasses.asdict(auto))
    if note and reason:
        note = reason.rstrip(".") + "." + note
    return section, note or reason, finding


def read_cluster(entry_path: str) -> tuple[str | None, frozenset[str]]:
    """The cluster a ledger entry compiled (`cluster_3`, None for a
    `jit_compile` function) and the TensorFlow ops it holds, from its
    unoptimized module (its name and its instructions' op names)."""
    from keras_xla.tf_backend import hlo

    try:
        unoptimized, _ = cache_entry.read_modules(entry_path)
        module = hlo.parse_hlo_module(unoptimized)
    except (OSError, ValueError):
        return None, frozenset()
    ops = frozenset(
        ins.metadata.op_name
        for computation in module.computations
        for ins in computation.instructions
        if ins.metadata.op_name
    )
    number = re.search(r"cluster_([0-9]*)", module.name)
    return (f"cluster_{number[1]}" if number and number[1] else None), ops


def covered(step_ops: frozenset[str], cluster_ops: set[str]) -> int:
    """How many of the traced step's ops ran inside XLA clusters.

    A cluster names an op by its path in the graph TensorFlow ran, which
    prefixes the step's own name with the calls it was inlined through
    (`StatefulPartitionedCall/dense/MatMul` for `dense/MatMul`)."""
    found = set()
    for name in cluster_ops:
        parts = name.split("/")
        for start in range(len(parts)):
            tail = "/".join(parts[start:])
            if tail in step_ops:
                found.add(tail)
                break
    return len(found)


def set_jit(on: bool) -> None:
    """Turns auto-clustering on or off (`tf.config.optimizer.set_jit`).
    Measured (TF 2.21): it takes effect on a built function at its next
    call; switching back reuses the compiled clusters."""
    import tensorflow as tf

    tf.config.optimizer.set_jit(on)
