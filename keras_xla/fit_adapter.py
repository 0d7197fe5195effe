"""What a fit needs of a backend: the contract between `FitOwner` and
each backend's `fit_adapter.py`.

Setting the fit up, building and putting on the step functions of the
model's configuration, the epoch's checks (the HLO analysis, the
programs' fingerprints and memory, the backend's own), giving the model
back, and the backend's step log (which also counts the compilations
since the guard's last look). Everything else, every rule included, is
the owner's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from keras_xla.auto.policy import Candidate
from keras_xla.auto.runner import TrialRunner
from keras_xla.core.shape_switch import BucketSwitch, ShapeSwitch


@dataclasses.dataclass(frozen=True)
class Start:
    """What a backend's setup tells the owner.

    Attributes:
        probed: Whether the step functions report each step's shapes (the
            trial and the baseline need them).
        devices: The devices the precision recommendation reads (None:
            the backend's own).
        xla_first: Whether the trial tries the fit's own XLA setting
            first (JAX: Keras's jitted step is the fit's own).
        defers_unknown: Whether a baseline over data of unknown length
            waits for the second epoch (TensorFlow: Keras's end-of-data
            call of a train function without XLA still counts a step).
    """

    probed: bool = True
    devices: Any = None
    xla_first: bool = False
    defers_unknown: bool = True


class FitAdapter:
    """What one backend does for a fit; the owner does the rest. Each
    backend's `fit_adapter.py` subclasses it, as Keras's backend trainers
    subclass its `Trainer`, and writes its sections and findings into
    `report` and `book`.

    Args:
        settings: The tuner's checked arguments.
        model: The model being fit.
        report: The fit's report.
        book: The fit's `FindingBook`.
        interrupted: What to call when a step raises inside the fit.

    Attributes:
        switch: The per-shape fallback's switch, once the guard put it
            (`switch_shapes`).
        log: The backend's step log, once set up: the calls as step
            records (`begin`, `complete`, `close`, `collect`, `take`,
            `drain`), the compilations since the guard's last look
            (`compilations(long_call)`: None where the last train call
            did not compile, else how many the backend recorded, 0 where
            it cannot say), and `abort()` when the fit raised.
    """

    def __init__(
        self,
        settings: Any,
        model: Any,
        report: Any,
        book: Any,
        interrupted: Callable[[], Any],
    ) -> None:
        self.settings, self.model = settings, model
        self.report, self.book = report, book
        self.interrupted = interrupted
        self.log: Any = None
        self.switch: ShapeSwitch | None = None

    def setup(self) -> Start:
        """Puts the model in the requested XLA and precision setting and
        writes the report's opening sections."""
        raise NotImplementedError

    def build(self, candidates: list[Candidate]) -> None:
        """Builds the candidates' step functions now (it raises where one
        cannot be built)."""
        raise NotImplementedError

    def put(self, trial: TrialRunner | None, decided: bool = False) -> None:
        """The model's step functions for its configuration now (`trial`:
        the windows running, if any; `decided`: a trial just chose)."""
        raise NotImplementedError

    def switch_shapes(self, bucket: dict | None = None) -> ShapeSwitch | None:
        """After a storm (`on_recompile_storm="per_shape"`): puts step
        functions that run XLA's program for the shapes it compiled and
        the step without XLA for any other (`shape_switch`), and keeps
        the switch in `switch`; with a `bucket` plan (`"bucket"`:
        `BucketSwitch`'s arguments) each batch is padded to its bucket
        first. None where a call takes several batches or the step runs
        on several replicas (the owner falls back)."""
        raise NotImplementedError

    def _switch_of(self, compiled: dict, bucket: dict | None) -> ShapeSwitch:
        """The switch for the XLA step's `compiled` shapes."""
        if bucket is None:
            return ShapeSwitch(compiled)
        return BucketSwitch(compiled, **bucket)

    def analyze_hlo(self, stats: Any, records: list) -> list:
        """The train step's HLO analysis (`report.hlo`), at no extra
        compilation; findings where it could not be made."""
        raise NotImplementedError

    def programs(self, compilations: list) -> None:
        """Fills each train `Compilation`'s program `fingerprint` (a job's
        report compares them) and `program_bytes` (the bucket choice
        keeps within the device's memory), where they cost no
        compilation."""
        raise NotImplementedError

    def epoch_checks(
        self, interrupted: bool
    ) -> list[Callable[[Any, list], list]]:
        """The backend's other checks of an epoch (the cache's labels
        first), each run on its own, `(stats, records)` -> `(code,
        message, fix)` findings; none that costs time in an
        `interrupted` epoch."""
        raise NotImplementedError

    def give_back(self, keep: bool, interrupted: bool) -> None:
        """What the fit set up comes down; the model is put back as the
        fit found it, unless `keep`."""
        raise NotImplementedError
