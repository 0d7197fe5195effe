"""XLATuner: the Keras callback that turns XLA on and explains what it does.

The callback is a thin set of hooks: it holds its arguments as one
checked value (`keras_xla.settings.Settings`; `tuner.<argument>` reads
and, checked, sets it), and each hook hands over to the fit's owner
(`keras_xla.fit_owner.FitOwner`, with the backend's adapter) that
holds the state of the current `fit`. Nothing below the callback imports
it or reaches into it.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from typing import Any

import keras
from keras.src.utils import io_utils

from keras_xla import backends
from keras_xla.core import findings as codes
from keras_xla.core.findings import XLAUnsupportedOpError
from keras_xla.core.guard import DEFAULT_BUDGET, XLARecompileStormError
from keras_xla.core.interrupts import on_error
from keras_xla.core.report import XLAReport
from keras_xla.fit_owner import FitOwner
from keras_xla.settings import ARGUMENTS, Settings

logger = logging.getLogger(__name__)


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
    Auto-clustering (`set_jit`, `--tf_xla_auto_jit`) is detected and its
    clusters' compilations counted too. Every run ends with a verdict
    (`report.verdict`): did XLA pay off against a no-XLA baseline measured
    in the same run, by how much, and the next step worth the most seconds.
    Each train step that stood out is labelled by what explains it
    (`report.epochs[i].spikes`: a compilation, a wait for its batch, a
    warm-up call, or nothing), and a step that mostly waits for its batch
    is `input-bound`: the verdict then puts the input first.

    Logged metrics (TensorBoard scalars in `<log_dir>/train`, one point per
    epoch, step = epoch): the figures of `keras_xla.core.figures.FIGURES`
    (compilations, recompilations, compile seconds, step times,
    throughput, XLA on or off; the HLO's and the compile cache's when
    there are; the README's TensorBoard table lists each tag). One point
    per train call (step = global train step, written at epoch end):
    `xla/step_time_ms`. Text: `xla/findings` (a Markdown table) and
    `xla/verdict`, each when it changed, and, after a trial,
    `xla/decision`; the report itself as `xla/report` (JSON, one per
    epoch) for TensorBoard's "XLA" tab (`keras_xla.dashboard`). The epoch
    scalars also go into Keras's `logs` (`add_to_logs`):
    `History.history["xla/compilations"]`, a `CSVLogger` column.

    Finding codes (all defined in `keras_xla.core.findings.CODES`):
    recompilation causes `partial-last-batch`, `batch-size-change`,
    `dynamic-dimension`, `dtype-change`, `rank-change`, `new-input`,
    `removed-input`, `retrace`; XLA off `jit-disabled-by-layer`,
    `jit-disabled-by-determinism`, `jit-disabled-run-eagerly`,
    `jit-disabled-by-strategy`, `jit-disabled-by-backend`,
    `unsupported-op`, `auto-clustering-inactive`,
    `auto-clustering-uncounted`; cost `dispatch-bound-steps`,
    `tuner-overhead`, `input-bound`, `compile-dominates`,
    `recompile-storm`,
    `tensor-core-alignment`; precision `policy-set-after-build`,
    `low-precision-output`, `missing-loss-scale`, `float16-on-cpu`,
    `bf16-without-hardware-support`; flags `unknown-xla-flag`,
    `xla-flag-wrong-variable`, `negated-xla-flag`,
    `xla-flag-missing-value`, `invalid-xla-flag-value`,
    `ignored-xla-flag-text`, `missing-xla-flags-file`; the tuner's own
    `compile-cache-inactive`, `profiler-busy`, `hlo-analysis-off`,
    `hlo-analysis-failed`,
    `trial-skipped`, `tuner-error`, `no-steps`, `output-failed`,
    `duplicate-tuner`, `folded-dimensions`; the cache
    `compile-cache-corrupt`, `compile-cache-read-only`,
    `compile-cache-untrusted`, `compile-cache-not-saved`,
    `compile-ledger-off`; on JAX `indivisible-batch` and
    `backend-unsupported`; the log dir `log-dir-shared`; a job's report
    `worker-missing`, `worker-compiled-alone`, `worker-program-differs`,
    `straggler`.

    The report (`tuner.report`) is also written to
    `<log_dir>/xla_report.json` at every epoch end and at train end. One
    worker of a job across workers (`MultiWorkerMirroredStrategy`, JAX's
    multi-process runtime) writes under `<log_dir>/workers/<index>/`, and
    the chief adds the job's report, `<log_dir>/xla_job_report.json`
    (`keras_xla.core.job`).

    Args:
        log_dir: TensorBoard log directory; give the same one as
            `keras.callbacks.TensorBoard` to see both side by side. `None`
            keeps everything in memory. Defaults to `None`.
        jit_compile: `True` turns XLA on for this `fit` (the train function
            is rebuilt once, in `on_train_begin`), `False` turns it off,
            `None` keeps the model's own setting, `"auto"` measures both
            in a live trial (`keras_xla.auto`) and keeps the faster.
            Defaults to `True`.
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
            as a cache hit or miss. TensorFlow never writes there itself
            (a full disk costs the cache, never a step), and a directory
            or entry another user could have written is not loaded.
            Defaults to `None`.
        trust_shared_cache: Load `compile_cache` even where other users
            can write it (a cache shared by a team): TensorFlow runs what
            an entry holds, so only pass `True` if you trust all of them.
            Links are never followed. Defaults to `False`.
        add_to_logs: Whether each epoch's `xla/*` figures (the epoch
            scalars listed above) also go into Keras's `logs`, so
            `History`, `CSVLogger`, Keras's `TensorBoard` and other
            loggers see them. Callbacks see them only when listed after
            the tuner (`History` always does). Defaults to `True`.
        on_unsupported: When XLA cannot compile the step (e.g. a
            `tf.py_function` or string op): `"fallback"` records an
            `unsupported-op` finding (op, layer, source line) and trains on
            without XLA; `"raise"` raises `XLAUnsupportedOpError`.
            Defaults to `"fallback"`.
        max_recompilations: The recompilation guard's budget: a train
            step that recompiled more than this many times for new
            shapes, still compiles for at least half of its last
            `2 * max_recompilations` calls (its shapes do not repeat),
            and has cost more seconds compiling than XLA saved, is a
            storm (`recompile-storm`, `report.guard`). The default, 8, is
            PyTorch's recompile limit; a pipeline of up to 9 buckets never
            reaches it. `None` turns the guard off. Defaults to `8`.
        on_recompile_storm: What the guard does: `"per_shape"` keeps
            running XLA's programs for the shapes it had compiled and runs
            only new shapes without XLA (one batch per call on one
            replica; elsewhere it falls back whole and says why; the
            summary gives the steps and seconds each way);
            `"fallback"` trains the rest of the fit without XLA from the
            next step (no step is lost, no shape compiles again; the
            summary says when, why and the compiling avoided, measured
            on the rest of the fit);
            `"bucket"` pads `x`'s drifting dimension up to edges chosen
            from the run (its sizes, compile seconds and step time) and
            keeps XLA for every batch, where the model masks the padding
            (labels per position are padded with zero weights, so the
            loss is unchanged) and each edge's program fits the device's
            memory; where padding could change the result it says why
            (`bucket-refused`) and runs per shape;
            `"raise"` raises `XLARecompileStormError` naming the input,
            the dimension and the fix; `"warn"` only warns. Defaults to
            `"per_shape"`.
        analyze_hlo: After the first epoch, analyze the optimized HLO of
            the train step XLA compiled for that epoch's shapes
            (`report.hlo`, the module under `<log_dir>/hlo/`), read from
            XLA's own record of its compilations: no compilation is
            added, and where there is no record the report says why
            (`hlo-analysis-off`). `"compile"` compiles the step once more
            for it instead (and writes HLO text); `False` skips it.
            Defaults to `True`.
        peak_flops: Peak FLOP/s for the utilization figure. `None` uses
            the peak measured earlier on this machine for this backend
            (`keras-xla doctor` on TensorFlow, or an earlier
            `"measure"`, keeps it), else leaves utilization out;
            `"measure"` measures it now with a short matmul probe (one
            small compilation, kept on disk). Defaults to `None`.
        profile_steps: `(start, stop)` global train steps to trace into
            `<log_dir>/plugins/profile/` (TensorBoard's Profile tab), with
            the trace's compile events in `report.profile`. Defaults to
            `None`.
        mixed_precision: `None` changes nothing and only checks the
            precision setup (findings); a policy name such as
            `"mixed_bfloat16"` applies it to the live model in
            `on_train_begin` (outputs stay float32, loss scaling for
            float16); `"auto"` measures float32 against
            `precision.recommend_policy()` in the trial. Defaults to `None`.
        trial_budget: The trial's length: a fraction of the first epoch's
            steps, or a number of steps; raised on a short run to what
            can decide, and an XLA candidate whose compile cannot pay back
            in the run is never compiled. The winner, its speedup over
            Keras's default configuration and its break-even step count go
            to `report.decision` and the `xla/decision` text summary.
            Defaults to `0.25`.
        baseline: With XLA on, measure the same step without XLA in short
            windows interleaved with XLA's early in the first epoch (real
            training steps, same weights and precision; 48 steps, 5% of
            a longer first epoch, at most 120), so the verdict can say
            whether XLA paid off (`report.baseline`, `report.verdict`).
            Its cost (the no-XLA steps beyond the same steps with XLA,
            their tracing included) is reported; it adds no XLA
            compilation. Defaults to `True`.
        trial_memory: Remember the trial's winner on disk, keyed by the
            model's weights, the first step's input signature, the
            hardware, the TensorFlow and Keras versions and the
            candidates, and start a later run with the same key on it with
            no trial (`report.decision.status == "remembered"`). Kept
            beside the compile cache if one is in force, else in
            `~/.cache/keras_xla` (`KERAS_XLA_CACHE_DIR`). Defaults to
            `True`.
        keep: Whether the model keeps the XLA setting the tuner chose (and
            the "auto" winner) after the fit. Otherwise `jit_compile`, the
            precision policy, auto-clustering and the step functions are
            put back when the fit ends, also when it raises;
            `report.jit.kept` says which. Defaults to `False`: the model
            is left as you compiled it.

    Example:

    ```python
    tuner = keras_xla.XLATuner(log_dir="logs")
    model.fit(ds, epochs=3, callbacks=[tuner])
    summary = tuner.report.summary()
    ```
    """

    # Batch ends only stamp a step's completion (thread-safe): Keras may
    # run them on its worker thread, where they read the clock once the
    # step's logs exist, and the training thread never waits.
    async_safe = True

    def __init__(
        self,
        log_dir: str | os.PathLike | None = None,
        jit_compile: bool | None = True,
        strict: bool = False,
        verbose: int = 1,
        compile_cache: str | os.PathLike | None = None,
        on_unsupported: str = "fallback",
        max_recompilations: int | None = DEFAULT_BUDGET,
        on_recompile_storm: str = "per_shape",
        analyze_hlo: bool | str = True,
        peak_flops: float | str | None = None,
        profile_steps: tuple[int, int] | None = None,
        mixed_precision: str | None = None,
        trial_budget: float | int = 0.25,
        baseline: bool = True,
        trial_memory: bool = True,
        keep: bool = False,
        trust_shared_cache: bool = False,
        add_to_logs: bool = True,
    ) -> None:
        super().__init__()
        given = locals()
        settings = Settings.checked(**{name: given[name] for name in ARGUMENTS})
        # A bad TF_XLA_FLAGS/XLA_FLAGS aborts the process at the first XLA
        # use; say so now, in words.
        problems = backends.flag_problems()
        if settings.strict:
            backends.raise_for_flags()
        status = None
        if settings.compile_cache is not None:
            # Now, not in on_train_begin: TensorFlow reads the flag at the
            # first XLA compilation of the process.
            status = backends.enable_compile_cache(
                settings.compile_cache, trust_shared=settings.trust_shared_cache
            )
        # The one value of the arguments; each fit reads it.
        self._settings = dataclasses.replace(
            settings,
            compile_cache=status.directory if status else None,
            flag_problems=tuple(problems),
            cache_status=status,
        )
        self._previous_trial = None  # (model, winner's state, decision)
        self._run = None  # the fit's owner
        self._report = XLAReport()

    @property
    def report(self) -> XLAReport:
        """The `XLAReport` of the current (or last) `fit`."""
        return self._report

    def on_train_begin(self, logs=None):
        stale = self._run
        if stale is not None and stale.active:
            # The last fit ended where no hook or wrapper saw it (an
            # interrupt in Keras's own loop): end it now.
            self._guarded("on_train_begin", stale.interrupted)
        # A new owner per fit: instances can be re-used.
        self._run = FitOwner(
            self._settings, self.model, self.params, self._previous_trial
        )
        self._report = self._run.report
        callbacks = _callback_list(self)
        listed = getattr(callbacks, "callbacks", ())
        first = next((c for c in listed if isinstance(c, XLATuner)), self)
        if first is not self:
            # Two owners of one model's step functions would each see half
            # the truth: the first one does the work, this one says so.
            self._run.book.add(
                codes.DUPLICATE_TUNER,
                f"Another XLATuner ({first!r}) is on this fit; this one "
                "does nothing, and its report holds only this finding.",
                "Pass one XLATuner to fit(callbacks=[...]); read its report.",
            )
            self._run.end()  # it never began: what it holds is let go
            return
        self._guarded("on_train_begin", self._run.begin)
        if callbacks is not None:
            # An error in any callback interrupts the fit: the tuner stops
            # its profiler window and writes its report on the way out.
            for hook in _LOOP_HOOKS:
                if hasattr(callbacks, hook):
                    hooked = on_error(
                        getattr(callbacks, hook), self._interrupted
                    )
                    setattr(callbacks, hook, hooked)

    def on_epoch_begin(self, epoch, logs=None):
        self._guarded("on_epoch_begin", self._run.epoch_begin, epoch)

    def on_train_batch_begin(self, batch, logs=None):
        self._guarded(
            "on_train_batch_begin", self._run.step_begin, "train", batch
        )

    def on_train_batch_end(self, batch, logs=None):
        self._guarded("on_train_batch_end", self._run.step_end, "train", batch)

    def on_test_begin(self, logs=None):
        self._validation("on_test_begin", "test_begin")

    def on_test_batch_begin(self, batch, logs=None):
        self._validation("on_test_batch_begin", "step_begin", "test", batch)

    def on_test_batch_end(self, batch, logs=None):
        self._validation("on_test_batch_end", "step_end", "test", batch)

    def on_test_end(self, logs=None):
        self._validation("on_test_end", "test_end")

    def on_epoch_end(self, epoch, logs=None):
        figures = self._guarded("on_epoch_end", self._run.epoch_end, epoch)
        if figures and self.add_to_logs and logs is not None:
            logs.update(figures)

    def on_train_end(self, logs=None):
        self._guarded("on_train_end", self._train_end)

    def _interrupted(self) -> None:
        self._run.interrupted()
        self._previous_trial = self._run.trial_result

    def _train_end(self) -> None:
        self._previous_trial = self._run.trial_result
        summary = self._run.end()
        if summary is None:
            return
        logger.info("keras_xla summary:\n%s", summary)
        if self.verbose:
            io_utils.print_msg(summary)

    def _validation(self, hook: str, method: str, *args) -> None:
        """A validation hook: an `evaluate()` outside a fit has no owner."""
        if self._run is not None:
            self._guarded(hook, getattr(self._run, method), *args)

    def _guarded(self, hook: str, fn, *args) -> Any:
        """`fn(*args)`'s result; None where it failed (recorded): the
        tuner's own failures never stop training."""
        try:
            return fn(*args)
        except Exception as error:  # noqa: BLE001
            if self.strict or isinstance(error, _USERS_ERRORS):
                raise
            logger.exception("keras_xla: XLATuner failed in %s", hook)
            self._run.book.add(
                codes.TUNER_ERROR,
                f"XLATuner failed in {hook}: {type(error).__name__}: {error}",
                "Please report this with the log; training continued "
                "without this diagnostic.",
                (hook, type(error).__name__, str(error)),
            )


# What the tuner raises because the user asked it to (`on_unsupported`,
# `on_recompile_storm`): never swallowed as its own failure.
_USERS_ERRORS = (XLAUnsupportedOpError, XLARecompileStormError)

# The callback-list hooks Keras's fit loop calls.
_LOOP_HOOKS = tuple(
    f"on_{part}"
    for part in (
        "epoch_begin", "epoch_end", "train_batch_begin", "train_batch_end",
        "test_begin", "test_end", "test_batch_begin", "test_batch_end",
        "train_end",
    )
)  # fmt: skip


def _callback_list(tuner: XLATuner):
    """The Keras callback list that is calling `tuner`'s hook, found on
    the call stack; None if it cannot be found."""
    frame = inspect.currentframe()
    try:
        for _ in range(8):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                break
            owner = frame.f_locals.get("self")
            callbacks = getattr(owner, "callbacks", None)
            if isinstance(callbacks, list) and any(
                c is tuner for c in callbacks
            ):
                return owner
    finally:
        del frame
    return None


def _argument(name: str) -> property:
    """`tuner.<name>`: the argument as checked; assigning it checks the
    new value, which the next fit uses. The compile cache is set up when
    the tuner is made, so its arguments cannot change after."""

    def get(tuner: XLATuner) -> Any:
        return getattr(tuner._settings, name)

    def set_(tuner: XLATuner, value: Any) -> None:
        if name in ("compile_cache", "trust_shared_cache"):
            raise AttributeError(
                f"`XLATuner.{name}` is set up when the tuner is made: make "
                f"a new XLATuner({name}=...)."
            )
        tuner._settings = tuner._settings.replaced(name, value)

    return property(get, set_, doc=f"`XLATuner({name}=...)`, checked.")


for _name in ARGUMENTS:
    setattr(XLATuner, _name, _argument(_name))
