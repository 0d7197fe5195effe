"""What every backend's owner of a fit holds, and how it closes an epoch.

`keras_xla.tf_backend.fit_run.FitRun` (TensorFlow) and
`keras_xla.jax_backend.fit_run.JaxFitRun` (JAX) own one `fit` each: the
tuner's hooks call the same methods on either. Both start from the same
state (the report, its findings, the accountant, the outputs) and close
an epoch the same way: their own stages (`_label_cache`, `_check`,
`_conclude`), each failing on its own, then the outputs, the JSON first.
"""

from __future__ import annotations

from typing import Any

from keras_xla.auto.policy import Status
from keras_xla.core import report as report_lib
from keras_xla.core import summaries
from keras_xla.core.accounting import Accountant
from keras_xla.core.findings import FindingBook
from keras_xla.fit_outputs import FitOutputs


class FitOwner:
    """The state of one `fit` that does not depend on the backend; a
    backend's owner names its TensorBoard writer (`summary_writer`).

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

    def __init__(
        self,
        settings: Any,
        model: Any,
        params: dict | None,
        previous_trial: tuple | None = None,
    ) -> None:
        self.settings = settings
        self.model = model
        self.params = params or {}
        self.report = report_lib.XLAReport()
        self.book = FindingBook(self.report.findings)
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

    def _trial_skipped(self) -> bool:
        """Whether "auto"'s trial could not run (it settled at once,
        skipped: the model trains as compiled)."""
        decision = self.report.decision
        return (
            self.trial is None
            and decision is not None
            and decision.status == Status.SKIPPED
        )

    def _close_epoch(
        self, stats: Any, records: list, interrupted: bool
    ) -> dict[str, float]:
        """The epoch's stages and outputs; returns its `xla/*` figures.
        Each stage fails on its own, and the JSON is written first of the
        outputs: it is what must survive a crash. An interrupted epoch
        gets no checks: the user is waiting."""
        stages = [self._label_cache, self._check, self._conclude]
        if interrupted:
            stages.remove(self._check)
        for stage in stages:
            self.outputs.safely(stage.__name__, stage, stats, records)
        self.outputs.write(stats, records)
        return summaries.epoch_figures(stats, self.report.hlo)

    def _label_cache(self, stats: Any, records: list) -> None:
        raise NotImplementedError

    def _check(self, stats: Any, records: list) -> None:
        raise NotImplementedError

    def _conclude(self, stats: Any, records: list) -> None:
        raise NotImplementedError
