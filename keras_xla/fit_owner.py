"""FitOwner: the one owner of a `fit` under XLATuner, on every backend.

The tuner's hooks call a `FitOwner`; it alone holds the fit's state: the
report, its findings, the accountant, the outputs, the running trial (or
no-XLA baseline windows). Every hook's skeleton lives here, once, and so
does every rule: a step's begin and end, an epoch's begin and end, a
validation run, planning the trial and the baseline, their windows and
their end, the recompilation guard, an interrupted fit, the fit's end.

What differs by backend is a small adapter (`fit_adapter.FitAdapter`,
subclassed in `tf_backend.fit_adapter` and `jax_backend.fit_adapter`),
as Keras keeps what its backends share in its `Trainer` and what
differs in each backend's file.

The pieces the owner uses take values and return results (records,
statistics, a trial's `Decided` or a baseline's `Measured`, report
sections, `(code, message, fix)` findings); the owner applies them.
Data flows one way: batch -> the backend's step log -> step records ->
accounting -> epoch statistics -> report -> verdict -> outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from keras_xla import backends
from keras_xla.auto import runner as auto_runner
from keras_xla.auto.model_state import ModelState
from keras_xla.auto.policy import AUTO, Candidate, Status
from keras_xla.auto.runner import Decided, Measured, Next, TrialRunner
from keras_xla.core import (
    figures,
    files,
    lints,
    render,
    workers,
)
from keras_xla.core import findings as codes
from keras_xla.core import job as job_lib
from keras_xla.core import report as report_lib
from keras_xla.core import verdict as verdict_lib
from keras_xla.core.accounting import Accountant
from keras_xla.core.findings import FindingBook
from keras_xla.fit_adapter import Start
from keras_xla.fit_outputs import FitOutputs, claim_log_dir
from keras_xla.storm_response import StormResponse

logger = logging.getLogger(__name__)

# The baseline section's reason when the fit ended in its windows.
ENDED_REASON = "the fit ended during the no-XLA baseline window"
# Why a trial or baseline window ended early on a recompilation storm.
GUARD_REASON = "the recompilation guard found a storm"


class FitOwner:
    """The state of one `fit` and what the tuner does with it.

    Args:
        settings: The tuner's checked arguments (`keras_xla.settings`).
        model: The model being fit.
        params: Keras's callback params (`steps`, `epochs`).
        previous_trial: An earlier fit's trial result with the same
            tuner, or None.
        adapter: The backend's `FitAdapter` subclass. Defaults to this
            process's backend's (`backends.fit_adapter()`).
    """

    def __init__(
        self,
        settings: Any,
        model: Any,
        params: dict | None,
        previous_trial: tuple | None = None,
        adapter: type | None = None,
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
                where = workers.worker_dir(settings.log_dir, self.worker.index)
                settings = dataclasses.replace(settings, log_dir=where)
        # The log dir is this fit's for its length: another process's fit
        # writing there keeps its report, and this one writes beside it.
        self._held, log_dir, shared = claim_log_dir(settings.log_dir)
        if shared is not None:
            self.book.add(codes.LOG_DIR_SHARED, *shared)
        self.settings = settings = dataclasses.replace(
            settings, log_dir=log_dir
        )
        run = weakref.ref(self)  # the model must not keep the fit alive
        self.adapter = (adapter or backends.fit_adapter())(
            settings,
            model,
            self.report,
            self.book,
            lambda: run() and run().interrupted(),
        )
        self.accountant = Accountant(self.report, self.book)
        self.trial_result = previous_trial
        self.active = False
        self.outputs = FitOutputs(settings, self.report, self.book)
        # The running trial or baseline windows.
        self.trial: TrialRunner | None = None
        self._start: Start | None = None
        self._user: ModelState | None = None
        # An epoch is closed once (an interrupt may reach `epoch_end`
        # again), and a validation run that began is accounted.
        self._epoch_open = False
        self._testing = False
        # (epoch, first step) of the train calls a trial or baseline ran
        # without XLA: not steady XLA steps.
        self._no_xla_calls: set[tuple[int, int]] = set()
        # The recompilation guard and what it does, and the last train
        # call's start and length (the guard looks at calls long enough
        # to have compiled). A storm it found is acted on once, at the
        # next train step (then it is the report's).
        self.storms = (
            StormResponse(self.adapter, self.worker.count if self.worker else 1)
            if settings.max_recompilations
            else None
        )
        self._train_began: float | None = None
        self._train_seconds = 0.0
        self._hlo_done = False

    @property
    def log(self) -> Any:
        """The backend's step log."""
        return self.adapter.log

    # The fit's start and end.

    def begin(self) -> None:
        """Sets the fit up: the model in the requested configuration (the
        backend's), then the trial or the baseline windows."""
        s = self.settings
        auto = AUTO in (s.jit_compile, s.mixed_precision)
        # The model as compiled, before the backend sets it up: where
        # "auto"'s trial cannot decide, it trains so.
        self._user = ModelState(self.model) if auto else None
        self._start = self.adapter.setup()
        if auto:
            self._plan_trial()
        if self._xla_trains() and (not auto or self._trial_skipped()):
            # XLA trains: its verdict needs the no-XLA baseline.
            self._plan_baseline()
        self.adapter.put(self.trial)
        self.active = True
        self._outside("before the fit")

    def _request(self) -> auto_runner.Request:
        """What the trial (or the baseline) is asked for in this fit."""
        start = self._start
        xla = self._xla_trains()
        return dataclasses.replace(
            self.settings.trial_request(
                xla,
                self.params,
                self._steps_per_call(),
                start.probed,
                self.report.clustering,
                workers=self.worker.count if self.worker else 1,
            ),
            devices=start.devices,
            first_jit=xla if start.xla_first else None,
            defer_unknown=start.defers_unknown,
        )

    def _plan_trial(self) -> None:
        """`"auto"`: the trial's runner, or its decision at once."""
        planned = auto_runner.plan(
            self.model, self._request(), self._user, self.trial_result
        )
        if isinstance(planned, Decided):
            self._settle(planned)
            return
        try:
            self.adapter.build(planned.trial.candidates)
        except Exception as error:  # noqa: BLE001 - never stop training
            _, decision = planned.trial.decide()
            problem = f"a candidate's step could not be built: {error}"
            fix = "Pass jit_compile and mixed_precision without 'auto'."
            self._settle(
                planned.settle(self.model, None, decision, (problem, fix))
            )
            return
        self.trial = planned

    def _plan_baseline(self) -> None:
        """The no-XLA baseline's windows, or the report's section saying
        why there are none."""
        planned = auto_runner.plan_baseline(self.model, self._request())
        if isinstance(planned, Measured):
            self.report.baseline = planned.baseline
            return
        try:
            self.adapter.build([planned.active])
            self.adapter.build([Candidate(False, planned.active.policy)])
        except Exception as error:  # noqa: BLE001 - never stop training
            planned.abandon(self.model)
            self.report.baseline = report_lib.BaselineSection(
                reason=f"the no-XLA step could not be built: {error}"
            )
            return
        self.trial = planned

    def end(self, interrupted: bool = False) -> str | None:
        """Ends the fit; returns the summary text (None if inactive). The
        log dir is no longer this fit's."""
        try:
            return self._end(interrupted)
        finally:
            files.release(self._held)
            self._held = None

    def _end(self, interrupted: bool) -> str | None:
        if not self.active:
            return None
        self.active = False
        try:
            self.log.close()
            self._outside("at the end of the fit")
        finally:
            # Whatever failed above, what the fit set up is taken down
            # and the model is put back.
            self._leave_model(interrupted)
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

    def _leave_model(self, interrupted: bool) -> None:
        """Puts back what the tuner switched for the fit (XLA, precision,
        auto-clustering, the step functions), unless the user asked to
        keep the tuner's choice (`keep`); a trial that did not decide
        chose nothing to keep. The report says which."""
        keep = bool(self.settings.keep)
        try:
            runner = self._abandon_trial()
            if runner is not None and runner.keep is None:
                keep = False  # an undecided trial chose nothing to keep
            self.adapter.give_back(keep, interrupted)
        except Exception as error:  # noqa: BLE001 - never stop training
            if self.settings.strict:
                raise
            logger.exception("keras_xla: could not put the model back")
            keep = True  # what is true of the model now
            self.book.add(
                codes.TUNER_ERROR,
                "XLATuner could not put the model back as you compiled it: "
                f"{type(error).__name__}: {error}",
                "Please report this with the log; call model.compile() "
                "again to reset its settings.",
                ("restore", type(error).__name__, str(error)),
            )
        if self.report.jit is not None:
            self.report.jit.kept = keep

    def _job_report(self) -> Any:
        """The chief of a job with a log dir: the job's report from every
        worker's (a bounded wait for them), written beside them; None
        elsewhere or where it failed (a finding)."""
        if self.worker is None or not self.worker.chief or not self.job_dir:
            return None
        try:
            return job_lib.chief_report(self.job_dir, self.worker, self.report)
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
            self.log.abort()  # a call's batch end may never come
            if self._testing:
                self.test_end()
            self.epoch_end(self.accountant.epoch, interrupted=True)
        finally:
            self.end(interrupted=True)

    # Per step: the clock is read first.

    def step_begin(self, function: str, batch: int) -> None:
        if self.active and function == "train" and self.storms is not None:
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

    # The trial and the baseline windows.

    def _trial_step(self, batch: int) -> None:
        """Before a train call in the trial's or the baseline's windows:
        the runner's schedule (`auto.runner.TrialRunner.before_call`)
        picks the side; its step functions go on the model."""
        runner = self.trial
        outcome = runner.before_call(
            self.model, lambda: self.log.collect("train", next_step=batch)
        )
        if outcome is Next.DONE:
            self._finish_trial()
            return
        if not runner.active.jit:
            self._no_xla_calls.add((self.accountant.epoch, batch))
        if outcome is Next.SWITCHED:
            self.adapter.put(runner)

    def _finish_trial(self) -> None:
        """The windows are over: the trial's decision or the baseline's
        section; the model trains on in the winner's (or XLA's)
        configuration."""
        runner, self.trial = self.trial, None
        self._settle(runner.finish(self.model, self.log.collect("train")))

    def _settle(self, settled: Decided | Measured) -> None:
        """A trial's `Decided` or a baseline's `Measured` in the report;
        the model's step functions follow its configuration."""
        if isinstance(settled, Measured):
            self.report.baseline = settled.baseline
            graph = settled.baseline.trace_seconds
            self.accountant.graph_seconds = graph or 0.0
            self.adapter.put(None)
            return
        self.report.decision = settled.decision
        if settled.skipped is not None:
            self.book.add(codes.TRIAL_SKIPPED, *settled.skipped)
        if settled.kept is not None:
            self.trial_result = (self.model, settled.kept, settled.decision)
        self.report.jit = report_lib.JitInfo(
            self.settings.jit_compile,
            self._xla_trains(),
            settled.jit_reason(),
        )
        self.adapter.put(None, decided=True)
        self.report.environment["policy"] = self.model.dtype_policy.name
        self.outputs.decided = True

    def _abandon_trial(self, why: str | None = None) -> TrialRunner | None:
        """The fit ended before the trial (or the baseline window) ended,
        or `why` it ended early: nothing was chosen (nothing measured),
        and the model trains as before the windows; returns the runner."""
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
        runner.abandon(self.model)
        self.adapter.put(None)
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
            self._start_deferred_baseline(epoch)
        self.accountant.start_epoch(epoch)
        self._epoch_open = True

    def _start_deferred_baseline(self, epoch: int) -> None:
        """Data of unknown length: the baseline window runs in the second
        epoch, as long as the first (Keras counted it, and ends it
        without an end-of-data call)."""
        baseline, epochs = self.report.baseline, self.report.epochs
        deferred = auto_runner.DEFERRED_REASON
        if epoch != 1 or baseline is None or baseline.reason != deferred:
            return
        if not (self._xla_trains() and epochs and epochs[0].steps):
            return
        self.params = dict(self.params, steps=epochs[0].steps)
        self._plan_baseline()
        if self.trial is not None:
            self.trial.trial.epoch = epoch
            self.adapter.put(self.trial)

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
        if self.storms is not None:
            self.storms.end_epoch(records, epoch)
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
        """The epoch's checks and outputs; returns its `xla/*` figures.
        Each check fails on its own, and the JSON is written first of the
        outputs: it is what must survive a crash. An interrupted epoch
        gets only what costs nothing: the user is waiting."""
        # The HLO analysis: once per fit, while XLA's step is on the
        # model, until it gave a section or said why not.
        hlo = not (self._hlo_done or interrupted)
        hlo = hlo and bool(self.settings.analyze_hlo) and self._xla_trains()
        checks = [] if interrupted else [self._programs]
        checks += [self._analyze_hlo] if hlo else []
        checks += self.adapter.epoch_checks(interrupted)
        if not interrupted:
            checks.append(self._lints)
        for check in checks:
            name = check.__name__
            self.outputs.safely(name, self._apply, check, stats, records)
        if hlo:
            said = {codes.HLO_ANALYSIS_OFF, codes.HLO_ANALYSIS_FAILED}
            self._hlo_done = self.report.hlo is not None or bool(
                said & set(self.report.finding_codes())
            )
        self.outputs.safely("the verdict", self._judge)
        self.outputs.write(stats, records)
        return figures.scalars(stats, self.report.hlo)

    def _apply(self, check: Callable, stats: Any, records: list) -> None:
        for code, message, fix in check(stats, records):
            self.book.add(code, message, fix)

    def _programs(self, stats: Any, records: list) -> list[tuple]:
        """The epoch's train programs' fingerprints and memory, into the
        compile log (`FitAdapter.programs`)."""
        epoch = [c for c in self.report.compile_log if c.epoch == stats.epoch]
        if epoch:
            self.adapter.programs(epoch)
        return []

    def _analyze_hlo(self, stats: Any, records: list) -> list[tuple]:
        """The HLO analysis (`FitAdapter.analyze_hlo`) of the calls that
        ran XLA's step: after a storm, per shape, a shape that ran
        without XLA has no program to read (analyzing it would compile
        one)."""
        switch = self.adapter.switch
        if switch is not None:
            records = [r for r in records if switch.ran_xla(r)]
        return self.adapter.analyze_hlo(stats, records)

    def _lints(self, stats: Any, records: list) -> list[tuple]:
        """The epoch's lints (`core.lints`) on its figures."""
        return lints.epoch_lints(stats, self._steps_per_call())

    def _judge(self) -> None:
        """The verdict, and the finding that reads it (whether compiling
        pays back is said once, by the verdict)."""
        self.report.verdict = verdict_lib.build(self.report)
        planned = verdict_lib.planned_steps(self.params)
        self.book.revise(
            codes.COMPILE_DOMINATES,
            verdict_lib.compile_dominates(self.report, planned),
        )

    def _xla_trains(self) -> bool:
        """Whether the train step compiles with XLA now, read from the
        model: the one place that holds it (`xla_setting.set_xla` writes
        it)."""
        model = self.model
        return bool(model.jit_compile) and not model.run_eagerly

    def _steps_per_call(self) -> int:
        return int(getattr(self.model, "steps_per_execution", 1) or 1)

    # The recompilation guard.

    def _watch_storm(self, batch: int) -> None:
        """Before train step `batch`: where the last call may have
        compiled, the calls so far are collected and shown to the guard;
        a storm is acted on now, before the step (a trial or baseline
        window running ends: XLA's side of it is the storm)."""
        storms, epoch = self.storms, self.accountant.epoch
        looking = storms.guard.storm is None and self._xla_trains()
        long_call = looking and storms.long_call(self._train_seconds)
        seen = self.log.compilations(long_call) if looking else None
        records: list = []
        if seen is not None:
            self._train_seconds = 0.0
            self.log.close(time.perf_counter())  # the last call ended
            records = self.log.collect("train", next_step=batch)
            storms.observe(records, epoch, seen)
        if storms.guard.storm is None or self.report.guard is not None:
            return
        if self.trial is not None:
            self._abandon_trial(GUARD_REASON)
        error = storms.act(
            epoch,
            batch,
            records,
            self._remaining_calls(epoch, batch),
            self._steps_per_call(),
        )
        if error is not None:
            self.interrupted()
            raise error

    def _remaining_calls(self, epoch: int, step: int) -> int | None:
        """The fit's train calls from `step` of `epoch` on (None:
        unknown)."""
        steps, epochs = self.params.get("steps"), self.params.get("epochs")
        if not steps or not epochs:
            return None
        left = (epochs - epoch) * steps - step
        return max(left, 0) // self._steps_per_call()


def _worker(model: Any) -> workers.Worker | None:
    """Which worker of a job this process is (None outside one, or where
    the backend could not say)."""
    try:
        return backends.worker(model)
    except Exception:  # noqa: BLE001 - never stop training
        logger.debug("keras_xla: no worker identity.", exc_info=True)
        return None
