"""XLATuner: the Keras callback that turns XLA on and explains what it does.

The callback is a thin conductor: `jit.py` decides whether XLA can be on,
`probe.py` records each step's concrete signature inside the compiled step,
`accounting.py` turns step records into statistics, compile estimates,
explanations and findings, `compile_cache.py` labels cache hits, and
`summaries.py` and `report.py` write the results.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import keras
from keras.src.utils import io_utils

from keras_xla import compile_cache as cache_lib
from keras_xla import jit as jit_lib
from keras_xla.accounting import Accountant, XLARecompilationWarning
from keras_xla.probe import ModelProbes
from keras_xla.report import EpochStats, XLAReport
from keras_xla.summaries import FINDINGS_TAG, SummaryWriter
from keras_xla.timing import StepRecord

logger = logging.getLogger(__name__)

TUNER_ERROR = "tuner-error"

__all__ = ["XLARecompilationWarning", "XLATuner"]


class XLATuner(keras.callbacks.Callback):
    """Turns XLA on for `fit`, counts its compilations and explains them.

    XLA compiles the train step once per concrete input signature. Keras
    traces the step with relaxed shapes, so its trace count stays flat
    while XLA recompiles for every new shape (a partial last batch, a new
    padded length). This callback records each step's signature from
    inside the compiled step, counts compilations exactly (also with
    `steps_per_execution > 1` and across `fit` calls), estimates their cost
    and names the input, dimension, shapes, cause and fix of each
    recompilation. When Keras silently keeps XLA off, the report says why.

    Logged metrics (TensorBoard scalars in `<log_dir>/train`, one point per
    epoch, step = epoch):

    - `xla/compilations`: XLA compilations in the epoch (train and
      validation, first ones included).
    - `xla/compile_seconds`: estimated seconds spent compiling.
    - `xla/recompilations`: compilations after each function's first.
    - `xla/step_time_ms_median`, `xla/step_time_ms_p90`: train step wall
      time over the steps that did not compile.
    - `xla/examples_per_second`: train examples per second over those steps.
    - `xla/findings` (text): the findings as a Markdown table.
    - With `compile_cache`: `xla/compile_cache_hits` and
      `xla/compile_cache_misses`, compilations served from the persistent
      cache and compiled afresh.

    Finding codes: `partial-last-batch`, `batch-size-change`,
    `dynamic-dimension`, `dtype-change`, `rank-change`, `new-input`,
    `removed-input`, `retrace`, `jit-disabled-by-layer`,
    `jit-disabled-by-determinism`, `jit-disabled-run-eagerly`,
    `jit-disabled-by-strategy`, `jit-disabled-by-backend`,
    `compile-cache-inactive`, `tuner-error`.

    The report (`tuner.report`) is also written to
    `<log_dir>/xla_report.json` at every epoch end and at train end.

    Args:
        log_dir: TensorBoard log directory; give the same one as
            `keras.callbacks.TensorBoard` to see both side by side. `None`
            keeps everything in memory. Defaults to `None`.
        jit_compile: `True` turns XLA on for this `fit` (the train function
            is rebuilt once, in `on_train_begin`), `False` turns it off,
            `None` keeps the model's own setting. Defaults to `True`.
        strict: Raise on the tuner's own failures, and when XLA was
            requested but cannot be on, instead of logging them as
            findings. Defaults to `False`.
        verbose: `1` prints a summary table at the end of training, `0`
            only logs it. Defaults to `1`.
        compile_cache: A directory for XLA's persistent compile cache, so a
            restarted run (or another worker or trial) loads compiled steps
            instead of compiling them. Enabled when the tuner is
            constructed, which must happen before the first XLA
            compilation of the process; the report marks each compilation
            as a cache hit or miss. Defaults to `None`.

    Example:

    ```python
    tuner = keras_xla.XLATuner(log_dir="logs")
    model.fit(ds, epochs=3, callbacks=[tuner])
    print(tuner.report.summary())
    ```
    """

    # Our batch hooks are begin hooks (always called in the main thread);
    # declaring this keeps Keras's asynchronous batch-end dispatch intact.
    async_safe = True

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        jit_compile: bool | None = True,
        strict: bool = False,
        verbose: int = 1,
        compile_cache: str | os.PathLike | None = None,
    ) -> None:
        super().__init__()
        if log_dir is not None and not isinstance(log_dir, (str, os.PathLike)):
            raise ValueError(
                f"Unsupported value `XLATuner(log_dir={log_dir!r})`: pass a "
                "directory path or None."
            )
        if jit_compile not in jit_lib.JIT_CHOICES:
            raise ValueError(
                f"Unsupported value `XLATuner(jit_compile={jit_compile!r})`. "
                "Possible choices are: True, False, None."
            )
        if verbose not in (0, 1):
            raise ValueError(
                f"Unsupported value `XLATuner(verbose={verbose!r})`. "
                "Possible choices are: 0, 1."
            )
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self.jit_compile = jit_compile
        self.strict = bool(strict)
        self.verbose = verbose
        self.compile_cache = None
        self._cache_status = None
        if compile_cache is not None:
            # Now, not in on_train_begin: TensorFlow reads the flag at the
            # first XLA compilation of the process.
            self._cache_status = cache_lib.enable_compile_cache(compile_cache)
            self.compile_cache = self._cache_status.directory
        self._report = XLAReport()
        self._active = False
        self._writer = None

    @property
    def report(self) -> XLAReport:
        """The `XLAReport` of the current (or last) `fit`."""
        return self._report

    # Keras hooks: each one is a guarded call to a private helper.

    def on_train_begin(self, logs=None):
        self._reset()
        self._guarded(self._train_begin)

    def on_epoch_begin(self, epoch, logs=None):
        self._guarded(self._epoch_begin, epoch)

    def on_train_batch_begin(self, batch, logs=None):
        self._guarded(self._step_begin, "train", batch)

    def on_test_begin(self, logs=None):
        self._guarded(self._close_step)

    def on_test_batch_begin(self, batch, logs=None):
        self._guarded(self._step_begin, "test", batch)

    def on_test_end(self, logs=None):
        self._guarded(self._test_end)

    def on_epoch_end(self, epoch, logs=None):
        self._guarded(self._epoch_end, epoch)

    def on_train_end(self, logs=None):
        self._guarded(self._train_end)

    # Setup.

    def _reset(self) -> None:
        # Allow instances to be re-used across fit calls.
        self._report = XLAReport()
        self._accountant = Accountant(self._report, None)
        self._active = False
        self._open = None
        self._records = {"train": [], "test": []}
        self._writer = SummaryWriter(self.log_dir) if self.log_dir else None
        # Unix time = perf_counter() + offset, without a second clock read
        # per step.
        self._clock_offset = time.time() - time.perf_counter()

    def _train_begin(self) -> None:
        model = self.model
        self._report.environment = _environment(model)
        info, cause = jit_lib.configure_jit(model, self.jit_compile)
        self._report.jit = info
        if cause is not None:
            code, reason, fix = cause
            if self.strict and self.jit_compile:
                raise ValueError(f"XLA cannot be enabled: {reason}. {fix}")
            self._accountant.add_finding(
                code, "warning", f"XLA is off: {reason}.", fix
            )
        self._cache_begin()
        self._jit_on = info.enabled
        self._probes = None
        native = getattr(model, "_keras_xla_native_probe", False)
        if native or jit_lib.replicas_in_sync(model) == 1:
            self._probes = ModelProbes.of(model)
            self._accountant.tracker = self._probes.tracker
            config = (info.enabled, int(model.steps_per_execution or 1))
            for function in ("train", "test"):
                self._probes.prepare(model, function, config)
        self._active = True

    def _cache_begin(self) -> None:
        status = self._cache_status
        if status is None:
            return
        self._report.compile_cache = {
            "directory": status.directory,
            "active": status.active,
            "entries_at_start": status.entries,
            "hits": 0,
            "misses": 0,
        }
        if not status.active:
            self._accountant.add_finding(
                cache_lib.INACTIVE_CODE,
                "warning",
                status.message,
                "Create the XLATuner (or call "
                "keras_xla.enable_compile_cache) before the first fit.",
            )

    # Per-step work: kept to a clock read and one small variable read.

    def _step_begin(self, function: str, batch: int) -> None:
        if not self._active:
            return
        self._close_step()
        self._open = (function, batch, time.perf_counter())

    def _close_step(self) -> None:
        now = time.perf_counter()
        if not self._active or self._open is None:
            return
        function, batch, start = self._open
        self._open = None
        probe = self._probes.probe(function) if self._probes else None
        record = StepRecord(
            function,
            batch,
            now - start,
            started_at=self._clock_offset + start,
            fallback_steps=int(self.model.steps_per_execution or 1),
        )
        if probe is not None:
            record.signatures = probe.read_new()
            record.trace_seconds = probe.pop_trace_seconds()
            if self._jit_on:
                tracker = self._probes.tracker
                record.new = [
                    (i, r)
                    for i, step in enumerate(record.signatures)
                    for r, sig in enumerate(step)
                    if tracker.observe(function, sig, r)
                ]
        self._records[function].append(record)

    # Epoch and validation ends.

    def _epoch_begin(self, epoch: int) -> None:
        self._accountant.start_epoch(epoch)
        self._records = {"train": [], "test": []}
        self._cache_before = (
            cache_lib.cache_entries(self.compile_cache)
            if self.compile_cache
            else {}
        )

    def _test_end(self) -> None:
        if not self._active:
            return
        self._close_step()
        records, self._records["test"] = self._records["test"], []
        self._accountant.finish_run("test", records, self._records["train"])

    def _epoch_end(self, epoch: int) -> None:
        if not self._active:
            return
        self._close_step()
        records, self._records["train"] = self._records["train"], []
        stats = self._accountant.finish_epoch(records)
        self._cache_epoch(stats)
        self._write_epoch(stats)

    def _cache_epoch(self, stats: EpochStats) -> None:
        if not self.compile_cache or not self._cache_status.active:
            return
        compiled = [
            c for c in self._report.compile_log if c.epoch == stats.epoch
        ]
        cache_lib.label_cache_use(
            compiled, self._cache_before, self.compile_cache
        )
        stats.compile_cache_hits = sum(c.cache == "hit" for c in compiled)
        stats.compile_cache_misses = sum(c.cache == "miss" for c in compiled)
        summary = self._report.compile_cache
        summary["hits"] += stats.compile_cache_hits
        summary["misses"] += stats.compile_cache_misses
        summary.update(
            cache_lib.record_compile_times(
                self.compile_cache, self._report.compile_log
            )
        )

    def _write_epoch(self, stats: EpochStats) -> None:
        if self._writer is None:
            return
        scalars = {
            "xla/compilations": stats.compilations,
            "xla/compile_seconds": stats.compile_seconds,
            "xla/recompilations": stats.recompilations,
            "xla/step_time_ms_median": stats.step_time_ms["median"],
            "xla/step_time_ms_p90": stats.step_time_ms["p90"],
            "xla/examples_per_second": stats.examples_per_second or 0.0,
        }
        if stats.compile_cache_hits is not None:
            scalars["xla/compile_cache_hits"] = stats.compile_cache_hits
            scalars["xla/compile_cache_misses"] = stats.compile_cache_misses
        self._writer.write_scalars(stats.epoch, scalars)
        self._writer.write_text(
            stats.epoch, FINDINGS_TAG, self._report.findings_markdown()
        )
        self._writer.flush()
        self._report.write(self.log_dir)

    def _train_end(self) -> None:
        if not self._active:
            return
        self._close_step()
        self._active = False
        if self._writer is not None:
            self._report.write(self.log_dir)
            self._writer.close()
        summary = self._report.summary()
        logger.info("keras_xla summary:\n%s", summary)
        if self.verbose:
            io_utils.print_msg(summary)

    # Failures of the tuner itself never stop training.

    def _guarded(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as error:  # noqa: BLE001
            if self.strict:
                raise
            logger.exception("keras_xla: XLATuner failed in %s", fn.__name__)
            try:
                self._accountant.add_finding(
                    TUNER_ERROR,
                    "error",
                    f"XLATuner failed in {fn.__name__}: "
                    f"{type(error).__name__}: {error}",
                    "Please report this with the log; training continued "
                    "without this diagnostic.",
                )
            except Exception:  # noqa: BLE001
                logger.exception("keras_xla: could not record the failure")


def _environment(model: Any) -> dict:
    import tensorflow as tf

    strategy = model.distribute_strategy
    policy = getattr(model, "dtype_policy", None)
    return {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "strategy": type(strategy).__name__,
        "replicas": int(getattr(strategy, "num_replicas_in_sync", 1)),
        "policy": getattr(policy, "name", str(policy)),
    }
