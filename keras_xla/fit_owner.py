"""FitOwner: the one owner of a `fit` under XLATuner, on every backend.

The tuner's hooks call a `FitOwner`; it alone holds the fit's state: the
report, its findings, the accountant, the outputs, the step log, the
running trial (or no-XLA baseline windows). Every hook's skeleton lives
here, once: a step's begin and end, an epoch's begin and end, a
validation run, the trial's windows and their end, an interrupted fit,
the fit's end. A backend's `fit_run.FitRun` (`tf_backend/`,
`jax_backend/`) subclasses it, as Keras's backend trainers subclass its
`Trainer`, and supplies only what differs: the fit's setup (`begin`),
putting a candidate's step functions on the model, what a fit borrows of
the model and gives back, and the epoch's cache labels and checks.

The pieces the owner uses take values and return results (records,
statistics, a trial's `Decided` or a baseline's `Measured`, report
sections, `(code, message, fix)` findings); the owner applies them.
Data flows one way: batch -> the backend's step log -> step records ->
accounting -> epoch statistics -> report -> verdict -> outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
from typing import Any

from keras_xla import backends
from keras_xla.auto.policy import Status
from keras_xla.auto.runner import Decided, Measured, Next
from keras_xla.core import files, lints, render, summaries
from keras_xla.core import findings as codes
from keras_xla.core import guard as guard_lib
from keras_xla.core import job as job_lib
from keras_xla.core import report as report_lib
from keras_xla.core import verdict as verdict_lib
from keras_xla.core.accounting import Accountant
from keras_xla.core.findings import FindingBook
from keras_xla.fit_outputs import FitOutputs

logger = logging.getLogger(__name__)

# The baseline section's reason when the fit ended in its windows.
ENDED_REASON = "the fit ended during the no-XLA baseline window"
# Why a trial or baseline window ended early on a recompilation storm.
GUARD_REASON = "the recompilation guard found a storm"


class FitOwner:
    """The state of one `fit` and what the tuner does with it.

    A backend's owner sets `log` (its step log: `begin`, `complete`,
    `close`, `collect`, `take`, `drain`) in `begin`, and `trial` while a
    trial or baseline runs (an `auto.runner.TrialRunner`).

    Args:
        settings: The tuner's checked arguments (`keras_xla.settings`).
        model: The model being fit.
        params: Keras's callback params (`steps`, `epochs`).
        previous_trial: An earlier fit's trial result with the same
            tuner, or None.
    """

    # The backend's `core.summaries.EventWriter` (None: TensorFlow's).
    summary_writer: type | None = None
    # The running trial or baseline windows (the backend's runner).
    trial: Any = None
    # The fit's step log (the backend's).
    log: Any = None

    def __init__(
        self,
        settings: Any,
        model: Any,
        params: dict | None,
        previous_trial: tuple | None = None,
    ) -> None:
        self.model = model
        self.params = params or {}
        self.report = report_lib.XLAReport()
        self.book = FindingBook(self.report.findings)
        # A worker of a job keeps its outputs under the job's log dir,
        # `<log_dir>/workers/<index>/`; the chief gathers them at the end.
        self.worker = _worker(model)
        self.job_dir = settings.log_dir if self.worker else None
        if self.worker is not None:
            self.report.worker = {**self.worker.to_dict(), "finished": False}
            if settings.log_dir:
                where = job_lib.worker_dir(settings.log_dir, self.worker.index)
                settings = dataclasses.replace(settings, log_dir=where)
        # The log dir is this fit's for its length: another process's fit
        # writing there keeps its report, and this one writes beside it.
        self._held: int | None = None
        if settings.log_dir:
            settings = self._claim(settings)
        self.settings = settings
        self.accountant = Accountant(self.report, self.book)
        self.trial_result = previous_trial
        self.active = False
        self.outputs = FitOutputs(
            settings, self.report, self.book, self.summary_writer
        )
        # An epoch is closed once (an interrupt may reach `epoch_end`
        # again), and a validation run that began is accounted.
        self._epoch_open = False
        self._testing = False
        # (epoch, first step) of the train calls a trial or baseline ran
        # without XLA: not steady XLA steps.
        self._no_xla_calls: set[tuple[int, int]] = set()
        # The recompilation guard, the epoch's train records it has seen,
        # and the last train call's start and length (the guard looks at
        # calls long enough to have compiled). A storm it found is acted
        # on once, at the next train step (then it is the report's).
        budget = settings.max_recompilations
        self.guard = guard_lib.RecompileGuard(budget) if budget else None
        self._guarded = 0
        self._train_began: float | None = None
        self._train_seconds = 0.0

    def _claim(self, settings: Any) -> Any:
        """Holds `settings.log_dir` for this fit; where another process's
        fit holds it, this fit's outputs go to its own folder in it
        (`<host>-<pid>`), and a finding says so. Returns the settings
        with the log dir this fit writes to."""
        log_dir = settings.log_dir
        path = os.path.join(log_dir, report_lib.REPORT_FILENAME)
        try:
            files.own_directory(log_dir)
            self._held = files.hold(path)
            if self._held is not None:
                return settings
            mine = os.path.join(
                log_dir, f"{socket.gethostname()}-{os.getpid()}"
            )
            files.own_directory(mine)
            self._held = files.hold(
                os.path.join(mine, report_lib.REPORT_FILENAME)
            )
        except OSError:
            return settings  # Its outputs will say what failed.
        self.book.add(
            codes.LOG_DIR_SHARED,
            f"Another process's fit is writing its report into "
            f"log_dir={log_dir!r}; this fit's report and TensorBoard run "
            f"went to {mine!r}, so neither overwrites the other.",
            "Give each run its own log_dir (a sweep: one folder per run).",
        )
        return dataclasses.replace(settings, log_dir=mine)

    # The fit's start and end.

    def begin(self) -> None:
        """Sets the fit up (the backend's): the model in the requested
        configuration, the step log, the trial or baseline."""
        raise NotImplementedError

    def end(self) -> str | None:
        """Ends the fit; returns the summary text (None if inactive). The
        log dir is no longer this fit's."""
        try:
            return self._end()
        finally:
            files.release(self._held)
            self._held = None

    def _end(self) -> str | None:
        if not self.active:
            return None
        self.active = False
        try:
            self.log.close()
            self._outside("at the end of the fit")
        finally:
            # Whatever failed above, what the fit set up is taken down
            # and the model is put back.
            self._release()
            self._leave_model()
        self._judge()
        if self.report.worker is not None:
            self.report.worker["finished"] = True
        job = self._job_report()
        if job is not None:
            step = max((e.epoch for e in self.report.epochs), default=0)
            self.outputs.write_job(step, job.to_json())
        self.outputs.write()
        text = render.summary(self.report)
        if job is not None:
            text += "\n\n" + "\n".join(render.job_summary(job))
        return text

    def _job_report(self) -> Any:
        """The chief of a job with a log dir: the job's report from every
        worker's (a bounded wait for them), written beside them; None
        elsewhere or where it failed (a finding)."""
        if self.worker is None or not self.worker.chief or not self.job_dir:
            return None
        try:
            reports = job_lib.gather(
                self.job_dir, self.worker.count, own=self.report
            )
            job = job_lib.build(reports, self.worker.count, self.worker.job)
            job.write(self.job_dir)
            return job
        except Exception as error:  # noqa: BLE001 - never stop training
            if self.settings.strict:
                raise
            logger.exception("keras_xla: the job report failed.")
            self.book.add(
                codes.OUTPUT_FAILED,
                f"the job report failed: {type(error).__name__}: {error}",
                f"Make log_dir={self.job_dir!r} a writable directory that "
                "every worker shares, or merge the workers' log dirs with "
                "`keras-xla report DIR DIR ...`.",
                ("the job report",),
            )
            return None

    def interrupted(self) -> None:
        """The fit raised (KeyboardInterrupt, another callback, the data,
        Keras between the hooks): the steps trained so far are accounted
        (an epoch already closed is not closed again), the model is left
        as the user compiled it, and the report is written, as at a train
        end that Keras will not call."""
        if not self.active:
            return
        try:
            self._stop_on_error()
            if self._testing:
                self.test_end()
            self.epoch_end(self.accountant.epoch, interrupted=True)
        finally:
            self.end()

    # Per step: the clock is read first.

    def step_begin(self, function: str, batch: int) -> None:
        if self.active and function == "train" and self.guard is not None:
            # Before this call's clock: a look after a compilation is
            # charged to the call that compiled, not to this one.
            self._watch_storm(batch)
        now = time.perf_counter()
        if not self.active:
            return
        if function == "train":
            if self.trial is not None:
                self.log.close(now)
                self._trial_step(batch)
            self._train_began = now
        self._call_begins(function, now)
        self.log.begin(function, batch, now)

    def step_end(self, function: str, batch: int) -> None:
        """A call's batch-end hook, maybe on Keras's worker thread: its
        results exist (Keras read its logs). What follows, Keras's end of
        the data and of the epoch, is not the step's."""
        now = time.perf_counter()
        if self.active:
            self.log.complete(function, batch, now)
            if function == "train" and self._train_began is not None:
                self._train_seconds = now - self._train_began
            self._call_ended()

    # The trial and the baseline windows.

    def _trial_step(self, batch: int) -> None:
        """Before a train call in the trial's or the baseline's windows:
        the runner's schedule (`auto.runner.TrialRunner.before_call`)
        picks the side; the backend puts it on the model."""
        runner = self.trial
        outcome = runner.before_call(
            self.model, lambda: self.log.collect("train", next_step=batch)
        )
        if outcome is Next.DONE:
            self._finish_trial()
            return
        if not runner.active.jit:
            self._no_xla_calls.add((self.accountant.epoch, batch))
        self._put_side(runner, outcome is Next.SWITCHED)

    def _finish_trial(self) -> None:
        """The windows are over: the trial's decision or the baseline's
        section; the model trains on in the winner's (or XLA's)
        configuration."""
        runner, self.trial = self.trial, None
        settled = runner.finish(self.model, self.log.collect("train"))
        self._settle(settled, runner.active)

    def _settle(self, settled: Decided | Measured, chosen: Any) -> None:
        """A trial's `Decided` or a baseline's `Measured` in the report;
        the model is in `chosen`'s configuration (a baseline's: XLA's)."""
        if isinstance(settled, Measured):
            self.report.baseline = settled.baseline
            self._measured(settled, chosen)
            return
        self.report.decision = settled.decision
        if settled.skipped is not None:
            self.book.add(codes.TRIAL_SKIPPED, *settled.skipped)
        if settled.kept is not None:
            self.trial_result = (self.model, settled.kept, settled.decision)
        self.report.jit = report_lib.JitInfo(
            self.settings.jit_compile,
            self._decided(chosen),
            settled.jit_reason(),
        )
        self._jit_settled()
        self.report.environment["policy"] = self.model.dtype_policy.name
        self.outputs.decided = True

    def _abandon_trial(self, why: str | None = None) -> Any:
        """The fit ended before the trial (or the baseline window) ended,
        or `why` it ended early: nothing was chosen (nothing measured);
        returns the runner."""
        runner, self.trial = self.trial, None
        if runner is None:
            return None
        if runner.keep is not None:
            reason = f"{why} during the no-XLA baseline window"
            self.report.baseline = report_lib.BaselineSection(
                reason=reason if why else ENDED_REASON
            )
        elif why:
            self.book.add(
                codes.TRIAL_SKIPPED,
                f"{why.capitalize()} during the XLA/precision trial: it "
                "did not decide.",
                "Give the inputs fixed shapes (the recompile-storm "
                "finding's fix).",
            )
        else:
            self.book.add(
                codes.TRIAL_SKIPPED,
                "The fit ended before the XLA/precision trial decided: "
                "nothing was chosen, and the model is left as you "
                "compiled it.",
                "Let the fit run past the trial's steps.",
            )
        self._abandoned(runner)
        return runner

    def _trial_skipped(self) -> bool:
        """Whether "auto"'s trial could not run (it settled at once,
        skipped: the model trains as compiled)."""
        decision = self.report.decision
        return (
            self.trial is None
            and decision is not None
            and decision.status == Status.SKIPPED
        )

    # Epochs and validation runs.

    def epoch_begin(self, epoch: int) -> None:
        if self.active:
            self._outside(f"before epoch {epoch}")
            self._epoch_begins(epoch)
        self.accountant.start_epoch(epoch)
        self._epoch_open = True

    def test_begin(self) -> None:
        if self.active:
            self._testing = True
            self._end_train_calls()
            epoch = self.accountant.epoch
            self._outside(f"before validation of epoch {epoch}")

    def test_end(self) -> None:
        self._testing = False
        if not self.active:
            return
        records = self.log.take("test")
        self._taken(records)
        train_so_far = self.log.collect("train")
        self.accountant.finish_run("test", records, train_so_far)

    def epoch_end(
        self, epoch: int, interrupted: bool = False
    ) -> dict[str, float] | None:
        """Closes the open epoch, once: its stats, checks and outputs. An
        `interrupted` epoch that trained no step is not listed, and gets
        no checks (its steps are all that is reported). Returns the
        epoch's `xla/*` figures (TensorBoard's epoch scalars), or None."""
        if not self.active or not self._epoch_open:
            return None
        self._end_train_calls(interrupted)
        records = self.log.take("train")
        self._epoch_open = False
        if interrupted and not records:
            return None
        self._taken(records)
        if self.guard is not None:
            self._observe(records)
        self._guarded = 0
        no_xla = {step for e, step in self._no_xla_calls if e == epoch}
        for record in records:
            record.warmup = record.warmup or record.first_step in no_xla
        if self.trial is not None:  # it goes on in the next epoch
            self.trial.new_epoch()
        stats = self.accountant.finish_epoch(records)
        stats.jit_compile = self._xla_trains()
        return self._close_epoch(stats, records, interrupted)

    def _end_train_calls(self, interrupted: bool = False) -> None:
        """Validation or the epoch's end: the train calls so far are
        collected; the trial ends with them unless it spans epochs (an
        interrupted fit's trial ends undecided)."""
        self._train_calls_end(interrupted)
        self.log.close()
        records = self.log.collect("train")
        if self.trial is None:
            return
        if interrupted:
            self._abandon_trial()
            return
        more = self.accountant.epoch + 1 < self.params.get("epochs", 1)
        if self.trial.pause(records, more):
            self._finish_trial()

    def _outside(self, when: str) -> None:
        """Steps run outside the fit's own calls (a callback's
        `evaluate`): set aside, their compilations reported."""
        self.report.outside_compilations.extend(self.log.drain(when))

    def _close_epoch(
        self, stats: Any, records: list, interrupted: bool
    ) -> dict[str, float]:
        """The epoch's stages and outputs; returns its `xla/*` figures.
        Each stage fails on its own, and the JSON is written first of the
        outputs: it is what must survive a crash. An interrupted epoch
        gets no checks: the user is waiting."""
        stages = [self._label_cache, self._check, self._conclude]
        if self.worker is not None:
            stages.insert(1, self._fingerprint)
        if interrupted:
            stages.remove(self._check)
        for stage in stages:
            self.outputs.safely(stage.__name__, stage, stats, records)
        self.outputs.write(stats, records)
        return summaries.epoch_scalars(stats, self.report.hlo)

    def _lints(self, stats: Any, misaligned: list = ()) -> list[tuple]:
        """The epoch's lints (`core.lints`) on its figures; `misaligned`:
        the layers the tensor-core lint names (a backend's)."""
        times = stats.step_time_ms
        return lints.epoch_lints(
            stats.epoch,
            times["median"],
            int(self.model.steps_per_execution or 1),
            misaligned,
            stats.steps,
            dispatch_ms=times.get("dispatch_median"),
            tuner_ms=times.get("tuner_median"),
            input_ms=times.get("input_median"),
        )

    def _conclude(self, stats: Any, records: list) -> None:
        """The epoch's last stage: the verdict so far."""
        self._judge()

    def _judge(self) -> None:
        """The verdict, and the finding that reads it (whether compiling
        pays back is said once, by the verdict)."""
        self.report.verdict = verdict_lib.build(self.report)
        planned = verdict_lib.planned_steps(self.params)
        self.book.revise(
            codes.COMPILE_DOMINATES,
            verdict_lib.compile_dominates(self.report, planned),
        )

    # The recompilation guard.

    def _watch_storm(self, batch: int) -> None:
        """Before train step `batch`: where the last call may have
        compiled, the calls so far are collected and shown to the guard;
        a storm is acted on now, before the step (a trial or baseline
        window running ends: XLA's side of it is the storm)."""
        looking = self.guard.storm is None and self._xla_trains()
        seen = self._compiled_in_last_call() if looking else None
        if seen is not None:
            self._train_seconds = 0.0
            self.log.close(time.perf_counter())  # the last call ended
            records = self.log.collect("train", next_step=batch)
            if records and seen > len(records[-1].new):
                # The backend saw more compilations than the call's own:
                # another function's (its spike is a compilation).
                records[-1].other_compilations += seen - len(records[-1].new)
            self._observe(records)
        if self.guard.storm is not None and self.report.guard is None:
            if self.trial is not None:
                self._abandon_trial(GUARD_REASON)
            self._act_on_storm(self.guard.storm, batch)

    def _observe(self, records: list) -> None:
        """The epoch's train records the guard has not seen yet."""
        new, self._guarded = records[self._guarded :], len(records)
        self.guard.observe(
            new, self._xla_saved_seconds(), self.accountant.epoch
        )

    def _xla_saved_seconds(self) -> float:
        """What XLA saved so far: the baseline's difference per step times
        the steps trained (0 before the baseline measured, or where XLA
        was the slower)."""
        b = self.report.baseline
        if b is None or b.no_xla_step_ms is None or b.xla_step_ms is None:
            return 0.0
        steps = sum(e.steps for e in self.report.epochs) + self._guarded
        return max(b.no_xla_step_ms - b.xla_step_ms, 0.0) / 1000.0 * steps

    def _remaining_calls(self, epoch: int, step: int) -> int | None:
        """The fit's train calls from `step` of `epoch` on (None:
        unknown)."""
        steps, epochs = self.params.get("steps"), self.params.get("epochs")
        if not steps or not epochs:
            return None
        spe = int(getattr(self.model, "steps_per_execution", 1) or 1)
        left = (epochs - epoch) * steps - step
        return max(left, 0) // spe

    def _act_on_storm(self, storm: Any, batch: int) -> None:
        """The guard found a storm; train step `batch` is next:
        `on_recompile_storm` says what to do (fall back to no XLA from
        that step, raise, or warn)."""
        action, epoch = self.settings.on_recompile_storm, self.accountant.epoch
        remaining = self._remaining_calls(epoch, batch)
        workers = self.worker.count if self.worker else 1
        message, fix, reason = guard_lib.act(
            storm, action, epoch, batch, remaining, workers
        )
        action = storm.action
        self.report.guard = storm
        place = ("train", storm.input, storm.dim)
        self.book.add(codes.RECOMPILE_STORM, message, fix, place)
        if action == "raise":
            self.interrupted()
            raise guard_lib.XLARecompileStormError(f"{message} Fix: {fix}")
        if action == "fallback":
            self._fall_back()
            if self.report.jit is not None:
                self.report.jit.enabled = False
                self.report.jit.reason = reason

    # What a backend supplies. Those with a body do nothing by default.

    def _fall_back(self) -> None:
        """The rest of the fit trains without XLA, from the next call: the
        model's step functions without XLA (of its precision)."""
        raise NotImplementedError

    def _compiled_in_last_call(self) -> int | None:
        """None where the last train call cannot have compiled; else the
        compilations the backend recorded since the guard last looked (0
        where it cannot say, or counts them per call). By default: a
        call that ran long enough (`guard.CHECK_SECONDS`, and twice the
        typical call that compiled nothing)."""
        typical = self.guard.typical_seconds or 0.0
        if self._train_seconds < max(guard_lib.CHECK_SECONDS, 2 * typical):
            return None
        return 0

    def _put_side(self, runner: Any, switched: bool) -> None:
        """The runner's `active` candidate trains the next call
        (`switched`: the runner just changed the model's configuration)."""
        raise NotImplementedError

    def _decided(self, chosen: Any) -> bool:
        """A trial decided and the model is in `chosen`'s configuration:
        its step functions train on; returns whether XLA is on."""
        raise NotImplementedError

    def _measured(self, measured: Measured, chosen: Any) -> None:
        """The baseline measured; XLA (`chosen`) trains on."""

    def _jit_settled(self) -> None:
        """The report's XLA setting is the trial's outcome."""

    def _abandoned(self, runner: Any) -> None:
        """The trial or baseline `runner` ended undecided."""

    def _call_begins(self, function: str, now: float) -> None:
        """A call of `function` is about to start (`now`)."""

    def _call_ended(self) -> None:
        """A call's batch-end hook ran (any thread)."""

    def _stop_on_error(self) -> None:
        """The fit raised: what must stop before the epoch is closed."""

    def _release(self) -> None:
        """The fit ends: what it set up comes down, before the model is
        put back."""

    def _leave_model(self) -> None:
        """Puts back what the fit changed on the model, unless `keep`."""
        raise NotImplementedError

    def _epoch_begins(self, epoch: int) -> None:
        """An epoch begins in an active fit."""

    def _train_calls_end(self, interrupted: bool) -> None:
        """The train calls so far are about to be collected."""

    def _taken(self, records: list) -> None:
        """A run's records were taken (an epoch's train records, or a
        validation run's)."""

    def _xla_trains(self) -> bool:
        """Whether the train step compiles with XLA now."""
        raise NotImplementedError

    def _label_cache(self, stats: Any, records: list) -> None:
        raise NotImplementedError

    def _check(self, stats: Any, records: list) -> None:
        raise NotImplementedError

    def _fingerprint(self, stats: Any, records: list) -> None:
        """In a job: each compilation so far gets its program's HLO
        fingerprint where the backend can give one at no compilation (the
        job report compares them across workers)."""


def _worker(model: Any) -> job_lib.Worker | None:
    """Which worker of a job this process is (None outside one, or where
    the backend could not say)."""
    try:
        return backends.worker(model)
    except Exception:  # noqa: BLE001 - never stop training
        logger.debug("keras_xla: no worker identity.", exc_info=True)
        return None
