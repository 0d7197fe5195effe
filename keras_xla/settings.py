"""XLATuner's arguments: checked when the tuner is made, frozen per fit.

`check_arguments` raises a `ValueError` naming the argument, the value
received and the fix; `Settings` is what one fit reads of the tuner.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from keras_xla.auto import memory as decision_memory
from keras_xla.auto import runner as auto_runner
from keras_xla.auto.policy import AUTO, validate_budget
from keras_xla.tf_backend import compile_cache as cache_lib
from keras_xla.tf_backend import flag_guard
from keras_xla.tf_backend import jit as jit_lib
from keras_xla.tf_backend import precision as precision_lib
from keras_xla.tf_backend.unsupported import CHOICES as UNSUPPORTED_CHOICES


@dataclasses.dataclass(frozen=True)
class Settings:
    """XLATuner's arguments, checked, as one fit needs them."""

    log_dir: str | None
    jit_compile: Any
    strict: bool
    verbose: int
    on_unsupported: str
    analyze_hlo: bool | str
    peak_flops: float | str | None
    profile_steps: tuple[int, int] | None
    mixed_precision: str | None
    trial_budget: float | int
    baseline: bool = True
    trial_memory: bool = True
    keep: bool = False
    flag_problems: tuple = ()
    cache_status: cache_lib.CacheStatus | None = None

    def setup_findings(self) -> list[tuple[str, str, str, tuple]]:
        """`(code, message, fix, place)` for bad XLA flags and a compile
        cache flag that came too late."""
        out = [
            (
                p.code,
                p.message,
                p.suggestion or "Remove the flag.",
                (p.variable, p.flag),
            )
            for p in self.flag_problems
        ]
        out += [fix.finding() for fix in flag_guard.FIXES]
        return out + cache_lib.setup_findings(self.cache_status)

    def trial_request(
        self,
        xla_possible: bool,
        params: dict,
        spe: int,
        probed: bool,
        clustering: Any = None,
    ) -> auto_runner.Request:
        """What the trial is asked for, and what this fit allows
        (`clustering`: the report's auto-clustering section)."""
        return auto_runner.Request(
            jit=self.jit_compile,
            precision=self.mixed_precision,
            budget=self.trial_budget,
            xla_possible=xla_possible,
            epoch_steps=params.get("steps"),
            steps_per_call=spe,
            probed=probed,
            baseline=self.baseline,
            epochs=params.get("epochs"),
            memory_dir=(
                decision_memory.directory(self.cache_status)
                if self.trial_memory
                else None
            ),
            # Auto-clustering is a candidate where the user turned it on
            # with set_jit (a flag cannot be switched) and it acts.
            clustering=bool(
                clustering is not None
                and clustering.active
                and "set_jit" in clustering.source
            ),
        )


def check_arguments(
    log_dir: Any,
    jit_compile: Any,
    verbose: Any,
    on_unsupported: Any,
    analyze_hlo: Any,
    peak_flops: Any,
    profile_steps: Any,
    mixed_precision: Any,
    trial_budget: Any,
    baseline: Any = True,
    strict: Any = False,
    trial_memory: Any = True,
    keep: Any = False,
    trust_shared_cache: Any = False,
    add_to_logs: Any = True,
) -> None:
    """Raises `ValueError` for the first unsupported argument, naming it,
    the value received and the fix."""
    if log_dir is not None and (
        not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir)
    ):
        raise ValueError(
            f"Unsupported value `XLATuner(log_dir={log_dir!r})`: pass a "
            "directory path or None."
        )
    if profile_steps is not None:
        check_profile_steps(profile_steps)
    for name, value, choices in (
        ("jit_compile", jit_compile, (*jit_lib.JIT_CHOICES, "auto")),
        ("verbose", verbose, (0, 1)),
        ("on_unsupported", on_unsupported, UNSUPPORTED_CHOICES),
        ("analyze_hlo", analyze_hlo, (True, False, "compile")),
    ):
        if value not in choices or isinstance(value, float):
            raise ValueError(
                f"Unsupported value `XLATuner({name}={value!r})`. "
                f"Possible choices are: {', '.join(map(repr, choices))}."
            )
    if profile_steps is not None and log_dir is None:
        raise ValueError(
            f"`XLATuner(profile_steps={profile_steps!r})` needs a log_dir."
        )
    number = isinstance(peak_flops, (int, float)) and not isinstance(
        peak_flops, bool
    )
    if not (
        peak_flops is None
        or peak_flops == "measure"
        or (number and peak_flops > 0)
    ):
        raise ValueError(
            f"Unsupported value `XLATuner(peak_flops={peak_flops!r})`: pass "
            "the peak FLOP/s (a number > 0), 'measure' or None."
        )
    for name, value, meaning in (
        ("strict", strict, "raise on the tuner's own failures"),
        ("baseline", baseline, "measure a no-XLA baseline window"),
        ("trial_memory", trial_memory, "remember the trial's winner"),
        ("keep", keep, "the model keeps the tuner's choice after the fit"),
        ("trust_shared_cache", trust_shared_cache, "load a shared cache"),
        ("add_to_logs", add_to_logs, "the xla/* figures go into logs"),
    ):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(
                f"Unsupported value `XLATuner({name}={value!r})`: pass True "
                f"({meaning}) or False."
            )
    validate_budget(as_int(trial_budget))
    if mixed_precision not in (None, AUTO):
        precision_lib.float_policy(mixed_precision, "XLATuner(mixed_precision")


def as_int(value: Any) -> Any:
    """A numpy integer as a Python int (anything else unchanged)."""
    if isinstance(value, np.integer):
        return int(value)
    return value


def check_profile_steps(steps: Any) -> tuple[int, int]:
    """`(start, stop)` global train steps with 0 <= start <= stop."""
    fix = (
        f"Unsupported value `XLATuner(profile_steps={steps!r})`: pass "
        "(start, stop), two integers with 0 <= start <= stop, e.g. (10, 20)."
    )
    if not isinstance(steps, (tuple, list)) or len(steps) != 2:
        raise ValueError(fix)
    start, stop = (as_int(v) for v in steps)
    ints = all(
        isinstance(v, int) and not isinstance(v, bool) for v in (start, stop)
    )
    if not ints or not 0 <= start <= stop:
        raise ValueError(fix)
    return start, stop
