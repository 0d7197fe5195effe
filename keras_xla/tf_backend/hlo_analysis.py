"""The HLO analysis of a model's train step for one steady signature.

After the first epoch, the optimized HLO of the train step for the epoch's
real batch shapes gives kernels per step, fusion ratio, converts and
FLOPs, and so achieved FLOP/s and utilization (`report.hlo`).

By default the module is the one XLA already compiled and ran, read from
the compile ledger (`compile_ledger`): the analysis adds no compilation.
Where there is no ledger entry for the step, the analysis is off and
`HloUnavailable` says why. `analyze_hlo="compile"` asks XLA to optimize
the step once more instead (a full compilation, and one more for the
text dump). A result is kept per step function and signature, so a later
fit with the same shapes reuses it.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from keras_xla.core import files, findings
from keras_xla.core.figures import rounded
from keras_xla.core.report import HloSection
from keras_xla.core.signatures import Signature
from keras_xla.tf_backend import cache_entry, compile_ledger
from keras_xla.tf_backend import flops as flops_lib
from keras_xla.tf_backend import hlo as hlo_lib

logger = logging.getLogger(__name__)

HLO_TEXT = os.path.join("hlo", "train_step.optimized.txt")
HLO_MODULE = os.path.join("hlo", "train_step.optimized.hlo.pb")


class HloUnavailable(Exception):
    """No free source of the train step's optimized HLO (the reason)."""


def analyze_train_step(
    model: Any,
    signature: Signature,
    cache: dict,
    epoch: int,
    median_ms: float | None,
    compile_log: list,
    mode: Any = True,
    peak_flops: float | str | None = None,
    log_dir: str | None = None,
) -> HloSection:
    """The report's `hlo` section for `model`'s train step on
    `signature`'s shapes.

    Args:
        model: The compiled Keras model.
        signature: The steady signature to analyze.
        cache: Results kept per signature (the step function's own).
        epoch: The epoch the signature comes from.
        median_ms: The epoch's median train step, for achieved FLOP/s.
        compile_log: The fit's `Compilation`s (to find the ledger entry
            of the step's compilation by its time).
        mode: `True` (the ledger), or `"compile"` (compile again).
        peak_flops: The hardware's peak FLOP/s; `None` uses the peak
            measured earlier on this machine, if any; `"measure"`
            measures it now (one small compilation, then kept on disk).
        log_dir: Where the optimized module goes (`<log_dir>/hlo/`).

    Raises:
        HloUnavailable: With the reason, when no free source exists.
    """
    start = time.perf_counter()
    step = getattr(model.train_step, "__wrapped__", model.train_step)
    written = None
    strategy = getattr(model, "distribute_strategy", None)
    replicas = getattr(strategy, "num_replicas_in_sync", 1)
    if signature.tensors not in cache:
        if replicas > 1:
            # Measured on TF 2.21 (MirroredStrategy, two logical CPUs): no
            # persistent-cache entry is written for a step compiled per
            # replica, and lowering it again outside the strategy fails on
            # its per-replica variables.
            raise HloUnavailable(
                f"the step compiles per replica ({replicas} replicas under "
                f"{type(strategy).__name__}); TensorFlow keeps no copy of "
                "its HLO then, and it cannot be lowered again outside the "
                "strategy"
            )
        if mode == "compile":
            batch = batch_from_signature(signature)
            result = hlo_lib.analyze_function(step, batch)
            if log_dir:
                text = hlo_lib.compiler_ir(step, batch, stage="optimized_hlo")
                path = os.path.join(log_dir, HLO_TEXT)
                written = hlo_lib.write_hlo_text(path, text)
        else:
            unoptimized, optimized = _ledger_modules(signature, compile_log)
            result = hlo_lib.analyze(
                hlo_lib.parse_hlo_module(optimized),
                hlo_lib.parse_hlo_module(unoptimized),
            )
            if log_dir:
                written = _write(os.path.join(log_dir, HLO_MODULE), optimized)
        cache[signature.tensors] = result
    result = cache[signature.tensors]
    achieved = None
    if median_ms:
        achieved = flops_lib.achieved_flops(result, median_ms / 1000.0)
    dtype = getattr(model.dtype_policy, "compute_dtype", "float32")
    peak = peak_flops
    if peak == "measure":
        peak = flops_lib.measured_peak_flops(dtype)
    elif peak is None:
        peak = flops_lib.known_peak_flops(dtype)
    return HloSection(
        epoch=epoch,
        shapes=signature.shapes(),
        analysis_seconds=round(time.perf_counter() - start, 3),
        kernels_per_step=result.kernels_per_step,
        fusions=result.fusions,
        fusion_ratio=rounded(result.fusion_ratio),
        converts=result.converts,
        unfused_converts=result.unfused_converts,
        flops_per_step=result.flops,
        largest_unfused=[
            f"{op.opcode} {op.name} {op.shape}" for op in result.largest_unfused
        ],
        achieved_tflops=_tera(achieved),
        peak_tflops=_tera(peak),
        utilization=(
            rounded(flops_lib.utilization(achieved, peak))
            if achieved and peak
            else None
        ),
        text=written if mode == "compile" else None,
        module=written if mode != "compile" else None,
        source="compiled again" if mode == "compile" else "compile ledger",
    )


def analyze_or_explain(*args, **kwargs) -> tuple[HloSection | None, tuple]:
    """`analyze_train_step(*args, **kwargs)`, never raising: the section,
    or None and the `(code, message, fix)` finding that says why not."""
    try:
        return analyze_train_step(*args, **kwargs), None
    except HloUnavailable as why:
        fix = why.args[1] if why.args[1:] else ""
        return None, (
            findings.HLO_ANALYSIS_OFF,
            f"The HLO analysis is off in this fit: {why.args[0]}; it never "
            "compiles the step again on its own.",
            (f"{fix} Or pass " if fix else "Pass ")
            + "XLATuner(analyze_hlo='compile') to pay one more compilation "
            "for it.",
        )
    except Exception as error:  # noqa: BLE001 - never stop training
        # The finding is what the user reads; the traceback is for a bug
        # report, at debug level (training goes on either way).
        logger.debug("keras_xla: HLO analysis failed", exc_info=True)
        return None, (
            findings.HLO_ANALYSIS_FAILED,
            f"HLO analysis failed: {type(error).__name__}: {error}. "
            "Training went on; the traceback is logged at debug level "
            f"(logging.getLogger({__name__!r}).setLevel(logging.DEBUG)).",
            "Pass XLATuner(analyze_hlo=False) to skip it, and please "
            "report the traceback.",
        )


def _ledger_modules(signature: Signature, compile_log) -> tuple[bytes, bytes]:
    """The `(unoptimized, optimized)` modules of the train step's
    compilation for `signature` in this fit, from the ledger."""
    shapes = signature.shapes()
    compiled = [
        c for c in compile_log if c.function == "train" and c.shapes == shapes
    ]
    if not compiled:
        raise HloUnavailable(
            f"the train step for {shapes} compiled before this fit"
        )
    return cache_entry.read_modules(_ledger_entry(compiled[-1]))


def _ledger_entry(compilation: Any) -> str:
    """The ledger entry a train step's `Compilation` wrote."""
    ledger = compile_ledger.status()
    if ledger.directory is None:
        raise HloUnavailable(ledger.reason, ledger.fix)
    # Entries are dated call by call only where something needs it (see
    # StepLog), else when the calls are collected: any entry dated from
    # the compilation on may be its, and its inputs tell which.
    paths = compile_ledger.entries_since(
        ledger.directory, compilation.started_at
    )
    shapes = compilation.shapes.values()
    candidates = [p for p in paths if _takes_inputs(p, shapes)]
    if not candidates:
        raise HloUnavailable(
            "XLA wrote no cache entry when the train step compiled (it was "
            "loaded from the persistent compile cache)"
        )
    # The call may also have compiled other clusters, and validation the
    # test step for the same shapes; the train step's module is the
    # largest entry.
    return max(candidates, key=cache_entry.size)


def program(compilation: Any) -> tuple[str | None, int | None]:
    """The HLO fingerprint (`hlo.program_fingerprint` of its module) and
    the memory (`cache_entry.program_bytes`) of the program a train
    step's `Compilation` compiled, from its ledger entry; None for what
    the ledger cannot say."""
    try:
        data = cache_entry.read_bytes(_ledger_entry(compilation))
        unoptimized, _ = cache_entry.parse_modules(data)
    except (HloUnavailable, OSError, ValueError):
        return None, None
    module = hlo_lib.parse_hlo_module(unoptimized)
    return hlo_lib.program_fingerprint(module), cache_entry.program_bytes(data)


def _takes_inputs(path: str, shapes) -> bool:
    """Whether the entry's module takes a parameter of each of `shapes`
    (the batch's tensors: the train step's module takes them all)."""
    try:
        unoptimized, _ = cache_entry.read_modules(path)
        module = hlo_lib.parse_hlo_module(unoptimized)
    except Exception:  # noqa: BLE001 - not an entry this can read
        return False
    params = [list(p.dimensions) for p in module.host_program_shape.parameters]
    for shape in shapes:
        if shape not in params:
            return False
        params.remove(shape)
    return True


def _write(path: str, data: bytes) -> str:
    # Whole or not at all, never through a link; after the report JSON
    # when a fit's outputs defer it (`core.files.write_later`).
    return files.write_later(path, data)


def batch_from_signature(signature: Signature) -> tuple:
    """Zero tensors with a signature's shapes, dtypes and structure
    (`x`, `y`, `sample_weight`; `/key` for dicts, `/i` for lists)."""
    import tensorflow as tf

    top: dict[str, Any] = {}
    for t in signature.tensors:
        *parents, name = t.path.split("/")
        node = top
        for key in parents:
            node = node.setdefault(key, {})
        node[name] = tf.zeros(t.shape, dtype=t.dtype)
    return tuple(
        _listify(top[name])
        for name in ("x", "y", "sample_weight")
        if name in top
    )


def _listify(node):
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_listify(node[k]) for k in sorted(node, key=int)]
    return {k: _listify(v) for k, v in node.items()}


def _tera(value: float | None) -> float | None:
    return None if value is None else rounded(value / 1e12)
