"""Deep diagnostics for XLATuner: unsupported ops, HLO, profiles, lints.

`Diagnostics` holds the parts of the tuner that look deeper than counting
compilations:

- unsupported ops: a preflight look for ops without an XLA kernel, and a
  guard around the train and test functions that catches the compile
  error, names the op, layer and source line, and falls back to training
  without XLA (or raises, with `on_unsupported="raise"`);
- HLO: after the first epoch, the optimized HLO of the train step for the
  epoch's real batch shapes gives kernels per step, fusion ratio, converts
  and FLOPs, so achieved FLOP/s and utilization;
- a profiler window over chosen train steps, for TensorBoard's Profile tab,
  with the exact compile events it recorded;
- lints: steps dominated by dispatch, compile time that does not pay back.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from keras_xla import compile_cache as cache_lib
from keras_xla import flops as flops_lib
from keras_xla import hlo as hlo_lib
from keras_xla import unsupported as unsupported_lib
from keras_xla.profiler import PROFILER_BUSY, ProfileWindow
from keras_xla.report import EpochStats

logger = logging.getLogger(__name__)

DISPATCH_BOUND = "dispatch-bound-steps"
TENSOR_CORE_ALIGNMENT = "tensor-core-alignment"
COMPILE_DOMINATES = "compile-dominates"
HLO_FAILED = "hlo-analysis-failed"
DISPATCH_MS = 1.0  # median steps shorter than this are launch-dominated
_MEASURED_PEAKS: dict[str, float] = {}


class Diagnostics:
    """The tuner's deep diagnostics for one `fit`.

    Args:
        tuner: The `XLATuner` (for its model, report, findings and the
            rebuild of step functions on fallback).
    """

    def __init__(self, tuner: Any) -> None:
        self.tuner = tuner
        self.window = None
        self._step = 0
        self._analyzed = False

    def report_setup(self) -> None:
        """Findings for bad XLA flags; the compile cache's report section."""
        tuner = self.tuner
        for problem in tuner._flag_problems:
            tuner._accountant.add_finding(
                problem.code,
                "error",
                problem.message,
                problem.suggestion or "Remove the flag.",
            )
        if tuner._cache_status is not None:
            cache_lib.start_report(
                tuner._cache_status, tuner.report, tuner._accountant
            )

    # Unsupported ops.

    def preflight(self) -> bool:
        """Looks for unsupported ops before training (custom layers only;
        Keras's own layers declare `supports_jit`). Returns True if found
        (and handled)."""
        model = self.tuner.model
        if not unsupported_lib.has_custom_layers(model):
            return False
        ops = unsupported_lib.preflight(model)
        if ops:
            self.handle_unsupported(ops)
        return bool(ops)

    def guard(self, function: str, fn):
        """Wraps a train/test function: an XLA unsupported-op error at run
        time falls back (or raises) instead of ending `fit` with a raw
        error. The batch of the failing step is consumed by TensorFlow
        before the compile fails; the step after it trains without XLA."""
        import tensorflow as tf

        probes = self.tuner._probes

        def guarded(iterator):
            try:
                return fn(iterator)
            except tf.errors.InvalidArgumentError as error:
                owner = probes.owner
                names = unsupported_lib.layer_names(owner.model)
                ops = unsupported_lib.parse_unsupported(str(error), names)
                if not ops:
                    raise
                owner._diagnostics.handle_unsupported(ops)
                owner._rebuild_functions()
                return getattr(owner.model, f"{function}_function")(iterator)

        return guarded

    def handle_unsupported(self, ops) -> None:
        """Finding (fallback) or `XLAUnsupportedOpError` (raise)."""
        tuner = self.tuner
        message, fix = unsupported_lib.describe_unsupported(ops)
        if tuner.on_unsupported == "raise":
            raise unsupported_lib.XLAUnsupportedOpError(f"{message} {fix}")
        tuner.model.jit_compile = False
        tuner._jit_on = False
        report = tuner.report
        report.jit.enabled = False
        report.jit.reason = message.rstrip(".")
        tuner._accountant.add_finding(
            unsupported_lib.UNSUPPORTED_CODE,
            "warning",
            f"{message} Training continues without XLA (jit_compile=False).",
            fix,
        )

    # HLO analysis after the first epoch.

    def analyze_hlo(self, stats: EpochStats, records) -> None:
        tuner = self.tuner
        if self._analyzed or not tuner.analyze_hlo or not tuner._jit_on:
            return
        signature = _steady_signature(records)
        if signature is None:
            return
        self._analyzed = True
        try:
            self._analyze(signature, stats)
        except Exception as error:  # noqa: BLE001 - never stop training
            logger.exception("keras_xla: HLO analysis failed")
            tuner._accountant.add_finding(
                HLO_FAILED,
                "info",
                f"HLO analysis failed: {type(error).__name__}: {error}",
                "Pass XLATuner(analyze_hlo=False) to skip it.",
            )

    def _analyze(self, signature, stats: EpochStats) -> None:
        tuner = self.tuner
        model = tuner.model
        # Once per model and signature: a later fit reuses the result.
        cache = tuner._probes.hlo_results if tuner._probes else {}
        key = (signature.tensors, id(model.train_function))
        start = time.perf_counter()
        if key not in cache:
            step = getattr(model.train_step, "__wrapped__", model.train_step)
            batch = batch_from_signature(signature)
            cache[key] = hlo_lib.analyze_function(step, batch)
        result = cache[key]
        seconds = time.perf_counter() - start
        median_ms = stats.step_time_ms["median"]
        achieved = (
            flops_lib.achieved_flops(result, median_ms / 1000.0)
            if median_ms
            else None
        )
        peak = tuner.peak_flops
        if peak is None and achieved is not None:
            dtype = getattr(model.dtype_policy, "compute_dtype", "float32")
            if dtype not in _MEASURED_PEAKS:  # once per process and dtype
                _MEASURED_PEAKS[dtype] = flops_lib.measure_peak_flops(dtype)
            peak = _MEASURED_PEAKS[dtype]
        tuner.report.hlo = {
            "epoch": stats.epoch,
            "shapes": {t.path: list(t.shape) for t in signature.tensors},
            "analysis_seconds": round(seconds, 3),
            "kernels_per_step": result.kernels_per_step,
            "fusions": result.fusions,
            "fusion_ratio": round(result.fusion_ratio, 4),
            "converts": result.converts,
            "unfused_converts": result.unfused_converts,
            "flops_per_step": result.flops,
            "largest_unfused": [
                f"{op.opcode} {op.name} {op.shape}"
                for op in result.largest_unfused
            ],
            "achieved_tflops": _tera(achieved),
            "peak_tflops": _tera(peak),
            "utilization": (
                round(flops_lib.utilization(achieved, peak), 4)
                if achieved and peak
                else None
            ),
        }
        if tuner.log_dir:
            text = hlo_lib.compiler_ir(step, batch, stage="optimized_hlo")
            path = os.path.join(
                tuner.log_dir, "hlo", "train_step.optimized.txt"
            )
            hlo_lib.write_hlo_text(path, text)
            tuner.report.hlo["text"] = path

    # Profiler window.

    def step_begin(self) -> None:
        """Called before every train step; starts/stops the window."""
        tuner = self.tuner
        steps = tuner.profile_steps
        if steps is None:
            return
        if self.window is None:
            self.window = ProfileWindow(tuner.log_dir, *steps)
        window = self.window
        if not window.done and not window.running and self._step == steps[0]:
            error = window.begin()
            if error:
                self._profiler_busy(error)
        elif window.running and self._step > steps[1]:
            self.end_profile()
        self._step += 1

    def end_profile(self) -> None:
        window = self.window
        if window is None or not window.running:
            return
        error = window.end()
        if error:
            self._profiler_busy(error)
            return
        events = window.compile_events()
        self.tuner.report.profile = {
            "steps": [window.start, window.stop],
            "directory": os.path.join(window.log_dir, "plugins", "profile"),
            "files": window.new_files(),
            "profiler_compilations": len(events),
            "profiler_compile_seconds": [round(e.seconds, 4) for e in events],
        }
        self.count_profiled()

    def count_profiled(self) -> None:
        """The tuner's compilations (train and validation) whose calls ran
        inside the profile window; called again at each epoch end, since
        the report learns of a run's compilations when the run ends."""
        window, profile = self.window, self.tuner.report.profile
        if window is None or profile is None:
            return
        profile["tuner_compilations"] = sum(
            window.started_at <= c.started_at <= window.ended_at
            for c in self.tuner.report.compile_log
        )

    def _profiler_busy(self, error: str) -> None:
        self.tuner._accountant.add_finding(
            PROFILER_BUSY,
            "info",
            f"The profiler window could not run: {error}",
            "Run one profiler at a time (keras.callbacks.TensorBoard("
            "profile_batch=...) or XLATuner(profile_steps=...)).",
        )

    # Lints.

    def lint(self, stats: EpochStats, records=()) -> None:
        tuner = self.tuner
        if stats.epoch == 0:
            signature = _steady_signature(records)
            batch = signature.batch_size() if signature else None
            misaligned = tensor_core_misalignment(tuner.model, batch)
            if misaligned:
                tuner._accountant.add_finding(
                    TENSOR_CORE_ALIGNMENT,
                    "info",
                    "Under float16/bfloat16 on a GPU, tensor cores need "
                    "sizes that are multiples of 8; not so here: "
                    + ", ".join(misaligned)
                    + ".",
                    "Round these sizes up to a multiple of 8.",
                )
        median = stats.step_time_ms["median"]
        spe = int(getattr(tuner.model, "steps_per_execution", 1) or 1)
        if median is not None and median < DISPATCH_MS and spe == 1:
            tuner._accountant.add_finding(
                DISPATCH_BOUND,
                "info",
                f"The median train step takes {median:.2f} ms: launching "
                "the step costs about as much as running it.",
                "Compile with `steps_per_execution=N` (e.g. 16) so one call "
                "runs N steps.",
            )
        planned = _planned_steps(tuner.params)
        if median and planned and stats.epoch == 0:
            train_seconds = planned * median / 1000.0
            compile_s = tuner.report.total_compile_seconds
            if compile_s > 0.5 * train_seconds:
                tuner._accountant.add_finding(
                    COMPILE_DOMINATES,
                    "warning",
                    f"Compiling took {compile_s:.1f} s against about "
                    f"{train_seconds:.1f} s of planned training "
                    f"({planned} steps): XLA will not pay back its compile "
                    "time in this run.",
                    "Train longer, use the persistent compile cache "
                    "(XLATuner(compile_cache=DIR)), or train without XLA.",
                )


def tensor_core_misalignment(model, batch_size, devices=None) -> list[str]:
    """Sizes that keep float16/bfloat16 matmuls and convolutions off a
    GPU's tensor cores (not multiples of 8): `Dense` units, convolution
    filters and the batch size. Empty without a GPU or in float32."""
    from keras_xla import hardware

    gpus = [
        d for d in hardware.describe_devices(devices) if d.device_type == "GPU"
    ]
    low = ("float16", "bfloat16")
    if not gpus:
        return []
    out = []
    for layer in model._flatten_layers(include_self=False):
        if getattr(layer, "compute_dtype", None) not in low:
            continue
        size = getattr(layer, "units", None) or getattr(layer, "filters", 0)
        if isinstance(size, int) and size % 8:
            kind = "units" if hasattr(layer, "units") else "filters"
            out.append(f"{layer.name} {kind}={size}")
    if out and batch_size and batch_size % 8:
        out.append(f"batch size {batch_size}")
    return out


def batch_from_signature(signature) -> tuple:
    """Zero tensors with a signature's shapes, dtypes and structure
    (`x`, `y`, `sample_weight`; `/key` for dicts, `/i` for lists)."""
    import tensorflow as tf

    top: dict[str, Any] = {}
    for t in signature.tensors:
        parts = t.path.split("/")
        value = tf.zeros(t.shape, dtype=t.dtype)
        node = top
        for key, nxt in zip(parts, parts[1:] + [None]):
            if nxt is None:
                node[key] = value
            else:
                node = node.setdefault(key, {})
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


def _steady_signature(records):
    """Replica 0's signature of the last train step that did not compile,
    else of the last step."""
    steps = [s for r in records for s in r.signatures]
    steady = [step for r in records if not r.new for step in r.signatures]
    chosen = steady or steps
    return chosen[-1][0] if chosen else None


def _planned_steps(params: dict | None) -> int | None:
    params = params or {}
    steps, epochs = params.get("steps"), params.get("epochs")
    if isinstance(steps, int) and isinstance(epochs, int):
        return steps * epochs
    return None


def _tera(value: float | None) -> float | None:
    # Six significant digits: tiny test models reach micro-TFLOP/s.
    return None if value is None else float(f"{value / 1e12:.6g}")
