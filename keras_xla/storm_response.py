"""StormResponse: one fit's recompilation guard and what it does.

The guard (`core.guard.RecompileGuard`) is shown the fit's train calls
where one may have compiled; once it finds a storm, `on_recompile_storm`
says what happens from the next train step: new shapes without XLA
(`per_shape`), the drifting dimension padded to buckets chosen from the
run and the device's memory (`bucket`), XLA off for every shape
(`fallback`), an error (`raise`) or a warning (`warn`). At each epoch's
end the report's guard section is brought up to date: what each side
ran, what the guard avoided, the buckets' edges and their memory.

The fit's owner (`fit_owner.FitOwner`) says when to look and ends a
running trial; this module holds the guard's state and its rules.
"""

from __future__ import annotations

import collections
import functools
from typing import Any

from keras_xla import backends, bucket_check, xla_setting
from keras_xla.core import accounting, buckets, hardware, render
from keras_xla.core import findings as codes
from keras_xla.core import guard as guard_lib
from keras_xla.core.shape_switch import BucketSwitch, x_size


class StormResponse:
    """The recompilation guard over one fit's train calls.

    Args:
        adapter: The backend's `FitAdapter`: the fit's settings, model,
            report and findings, and what the response asks of the
            backend (switch shapes, read programs, put step functions).
        workers: How many workers train the fit (per shape and buckets
            need one).
    """

    def __init__(self, adapter: Any, workers: int) -> None:
        self.adapter, self.workers = adapter, workers
        self.report, self.book = adapter.report, adapter.book
        budget = adapter.settings.max_recompilations
        self.guard = guard_lib.RecompileGuard(budget)
        self.seen = 0  # the epoch's train records the guard has seen
        # After a fallback: the shapes it ran without XLA that XLA had
        # not compiled (each a compilation avoided).
        self.avoided: set[tuple] = set()
        # The bucket plan's measured program bytes, by size.
        self.bucket_bytes: dict[int, int] = {}

    def long_call(self, seconds: float) -> bool:
        """Whether a train call ran long enough to have compiled
        (`guard.CHECK_SECONDS`, and twice the typical call that compiled
        nothing)."""
        typical = self.guard.typical_seconds or 0.0
        return seconds >= max(guard_lib.CHECK_SECONDS, 2 * typical)

    def observe(self, records: list, epoch: int, compiled: int = 0) -> None:
        """The epoch's train `records` the guard has not seen yet; the
        backend saw `compiled` compilations in the last call (more than
        its own: another function's, and its spike is a compilation)."""
        if records and compiled > len(records[-1].new):
            records[-1].other_compilations += compiled - len(records[-1].new)
        new, self.seen = records[self.seen :], len(records)
        self.guard.observe(new, self._xla_saved_seconds(), epoch)

    def _xla_saved_seconds(self) -> float:
        """What XLA saved so far: the baseline's difference per step times
        the steps trained (0 before the baseline measured, or where XLA
        was the slower)."""
        b = self.report.baseline
        if b is None or b.no_xla_step_ms is None or b.xla_step_ms is None:
            return 0.0
        steps = sum(e.steps for e in self.report.epochs) + self.seen
        return max(b.no_xla_step_ms - b.xla_step_ms, 0.0) / 1000.0 * steps

    def act(
        self,
        epoch: int,
        batch: int,
        records: list,
        remaining: int | None,
        per_call: int,
    ) -> guard_lib.XLARecompileStormError | None:
        """The guard found a storm in the epoch's train `records`; train
        step `batch` is next, `remaining` calls are left (None: unknown),
        each of `per_call` batches: `on_recompile_storm` says what to do.
        Returns the error to raise (`raise`), else None."""
        storm, asked = (
            self.guard.storm,
            self.adapter.settings.on_recompile_storm,
        )
        action, switch, instead = asked, None, ""
        if action == "bucket" and self.workers == 1:
            bucket = self._bucket_plan(storm, records, remaining, epoch)
            switch = bucket and self.adapter.switch_shapes(bucket)
            action = "bucket" if switch is not None else "per_shape"
        if action == "per_shape" and self.workers == 1:
            switch = switch or self.adapter.switch_shapes()
            if switch is None:
                action = "fallback"
                runs = (
                    f"runs {per_call} batches per call"
                    if per_call > 1
                    else "runs its step on several replicas"
                )
                instead = (
                    f" on_recompile_storm={asked!r} needs one batch per "
                    f"train call on one replica; this fit {runs}, so XLA "
                    "is off for every shape instead."
                )
        kept = len(switch.compiled["train"]) if switch is not None else 0
        message, fix, reason = guard_lib.act(
            storm, action, epoch, batch, remaining, self.workers, kept
        )
        message += instead
        self.report.guard = storm
        place = ("train", storm.input, storm.dim)
        self.book.add(codes.RECOMPILE_STORM, message, fix, place)
        if storm.action == "raise":
            return guard_lib.XLARecompileStormError(f"{message} Fix: {fix}")
        if storm.action == "fallback":
            # The model's step functions without XLA (of its precision,
            # built once per model): no step is lost, nothing compiles.
            xla_setting.set_xla(self.adapter.model, False)
            self.adapter.put(None)
        if storm.action in guard_lib.ACTING and self.report.jit is not None:
            # Per shape and bucketed XLA stays on.
            self.report.jit.enabled = storm.action != "fallback"
            self.report.jit.reason = reason
        return None

    def end_epoch(self, records: list, epoch: int) -> None:
        """The epoch's train `records`: the guard sees the rest, and the
        storm's section counts what each side ran and what was avoided,
        and the buckets' edges with their memory."""
        self.observe(records, epoch)
        self.seen = 0
        storm, switch = self.report.guard, self.adapter.switch
        if storm is None:
            return
        if switch is not None:
            knows = functools.partial(switch.knows, "train")
        else:
            compiled = {
                guard_lib.shapes_key(c.shapes)
                for c in self.report.compile_log
                if c.function == "train"
            }

            def knows(signature: Any) -> bool:
                return guard_lib.signature_key(signature) in compiled

        guard_lib.count_avoided(storm, records, knows, epoch, self.avoided)
        if isinstance(switch, BucketSwitch):
            storm.edges, storm.grown = list(switch.edges), list(switch.grown)
            if self.bucket_bytes:
                storm.edge_bytes = [
                    buckets.projected_bytes(self.bucket_bytes, edge)
                    for edge in switch.edges
                ]
            switch.mark_planned(records, storm.off_from, epoch)

    def _bucket_plan(
        self, storm: Any, records: list, remaining: int | None, epoch: int
    ) -> dict | None:
        """`on_recompile_storm="bucket"`: the switch's plan (the storm's
        `edges`, `padding_share` and `bucket_saved_seconds` filled), from
        the sizes the epoch's train calls ran, scaled to the fit's
        remaining calls, at the storm's compile seconds and the typical
        step's time per unit of the dimension; None, with the finding
        that says why, where padding could change the result."""
        last = records[-1].signatures if records else []
        signature = last[-1][0] if last else None
        plan, why = bucket_check.plan(self.adapter.model, signature, storm)
        if plan is None:
            self._refuse_bucket(storm, why)
            return None
        sizes = collections.Counter(
            x_size(step[0], plan["dim"])
            for r in records
            for step in r.signatures
        )
        sizes.pop(None, None)
        measured = self._program_bytes(records, plan["dim"], epoch)
        limit = hardware.memory_limit(backends.device_infos())
        largest = buckets.largest_fitting(measured, limit)
        if largest is not None and min(sizes) > largest:
            self._refuse_bucket(
                storm,
                f"no size of it fits the device's memory: a program of "
                f"size {min(sizes)} needs about "
                f"{render.size(buckets.projected_bytes(measured, min(sizes)))}"
                f" of {render.size(limit)}",
            )
            return None
        choice = buckets.choose_for_run(
            sizes,
            remaining,
            storm.compile_seconds / max(storm.recompilations, 1),
            self.guard.typical_seconds or 0.0,
            largest,
        )
        storm.edges = list(choice.edges)
        storm.padding_share = choice.padding_share
        storm.bucket_saved_seconds = choice.saved_seconds
        storm.memory_limit_bytes, storm.largest_fitting = limit, largest
        # Each edge's program's bytes are filled as the edges grow.
        self.bucket_bytes = measured
        return {**plan, "edges": list(choice.edges), "largest": largest}

    def _program_bytes(
        self, records: list, dim: int, epoch: int
    ) -> dict[int, int]:
        """The memory of the programs the storm's train calls compiled, by
        the size of `x`'s dimension `dim` (`FitAdapter.programs`)."""
        compiled = [
            accounting.compilation("train", epoch, r, i, rep)
            for r in records
            for i, rep in r.new
        ]
        self.adapter.programs(compiled)
        return {
            c.shapes["x"][dim]: c.program_bytes
            for c in compiled
            if c.program_bytes and len(c.shapes.get("x", ())) > dim
        }

    def _refuse_bucket(self, storm: Any, why: str) -> None:
        """The `bucket-refused` finding: the guard runs per shape."""
        message = (
            f"on_recompile_storm='bucket' did not pad {guard_lib.where(storm)}"
            f": {why}. New shapes run without XLA instead (per shape)."
        )
        place = ("train", storm.input, storm.dim)
        self.book.add(codes.BUCKET_REFUSED, message, bucket_check.FIX, place)
