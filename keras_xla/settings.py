"""XLATuner's arguments as one checked value, `Settings`: the tuner holds
it, and each fit reads it."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from keras_xla import precision as precision_lib
from keras_xla import xla_setting
from keras_xla.auto import memory as decision_memory
from keras_xla.auto import runner as auto_runner
from keras_xla.auto.policy import AUTO, validate_budget
from keras_xla.core import guard
from keras_xla.core.cache_directory import CacheStatus


@dataclasses.dataclass(frozen=True)
class Settings:
    """XLATuner's arguments, checked (`XLATuner`'s docstring says what
    each means; its signature holds the defaults), and what the process
    found when the tuner was made: the XLA flags' problems and the
    compile cache's status (`compile_cache` is then its directory)."""

    log_dir: str | None
    jit_compile: Any
    strict: bool
    verbose: int
    compile_cache: str | None
    on_unsupported: str
    max_recompilations: int | None
    on_recompile_storm: str
    analyze_hlo: bool | str
    peak_flops: float | str | None
    profile_steps: tuple[int, int] | None
    mixed_precision: str | None
    trial_budget: float | int
    baseline: bool
    trial_memory: bool
    keep: bool
    trust_shared_cache: bool
    add_to_logs: bool
    flag_problems: tuple = ()
    cache_status: CacheStatus | None = None

    @classmethod
    def checked(cls, **arguments: Any) -> Settings:
        """The arguments, checked (`check_arguments`) and normalized
        (paths as strings, numpy integers as ints)."""
        check_arguments(**arguments)
        a = arguments
        log_dir, steps = a["log_dir"], a["profile_steps"]
        return cls(
            **{
                **a,
                "log_dir": None if log_dir is None else os.fspath(log_dir),
                "profile_steps": check_profile_steps(steps) if steps else None,
                "trial_budget": as_int(a["trial_budget"]),
                "max_recompilations": as_int(a["max_recompilations"]),
                **{name: bool(a[name]) for name in FLAGS},
            }
        )

    def replaced(self, name: str, value: Any) -> Settings:
        """These settings with argument `name` set to `value`, checked."""
        arguments = {n: getattr(self, n) for n in ARGUMENTS}
        again = Settings.checked(**{**arguments, name: value})
        return dataclasses.replace(
            again,
            flag_problems=self.flag_problems,
            cache_status=self.cache_status,
        )

    def trial_request(
        self,
        xla_possible: bool,
        params: dict,
        spe: int,
        probed: bool,
        clustering: Any = None,
        workers: int = 1,
    ) -> auto_runner.Request:
        """What the trial is asked for, and what this fit allows
        (`clustering`: the report's auto-clustering section; `workers`:
        the job's, where this fit is one worker of a job)."""
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
            workers=workers,
        )


# The tuner's arguments that are True or False, and what True means.
FLAGS = {
    "strict": "raise on the tuner's own failures",
    "baseline": "measure a no-XLA baseline window",
    "trial_memory": "remember the trial's winner",
    "keep": "the model keeps the tuner's choice after the fit",
    "trust_shared_cache": "load a shared cache",
    "add_to_logs": "the xla/* figures go into logs",
}


def check_arguments(**arguments: Any) -> None:
    """Raises `ValueError` for the first unsupported argument, naming it,
    the value received and the fix."""
    unknown = set(arguments) ^ set(ARGUMENTS)
    if unknown:
        raise TypeError(f"XLATuner arguments {sorted(unknown)} are unknown")
    a = arguments
    profile_steps, peak_flops = a["profile_steps"], a["peak_flops"]
    mixed_precision = a["mixed_precision"]
    for name in ("log_dir", "compile_cache"):
        path = a[name]
        if path is not None and (
            not isinstance(path, (str, os.PathLike)) or not os.fspath(path)
        ):
            raise ValueError(
                f"Unsupported value `XLATuner({name}={path!r})`: pass a "
                "directory path or None."
            )
    if profile_steps is not None:
        check_profile_steps(profile_steps)
    for name, choices in (
        ("jit_compile", (*xla_setting.JIT_CHOICES, "auto")),
        ("verbose", (0, 1)),
        ("on_unsupported", ("fallback", "raise")),
        ("on_recompile_storm", guard.ACTIONS),
        ("analyze_hlo", (True, False, "compile")),
    ):
        value = a[name]
        if value not in choices or isinstance(value, float):
            raise ValueError(
                f"Unsupported value `XLATuner({name}={value!r})`. "
                f"Possible choices are: {', '.join(map(repr, choices))}."
            )
    if profile_steps is not None and a["log_dir"] is None:
        raise ValueError(
            f"`XLATuner(profile_steps={profile_steps!r})` needs a log_dir."
        )
    if peak_flops not in (None, "measure") and (
        isinstance(peak_flops, bool)
        or not isinstance(peak_flops, (int, float))
        or not peak_flops > 0
    ):
        raise ValueError(
            f"Unsupported value `XLATuner(peak_flops={peak_flops!r})`: pass "
            "the peak FLOP/s (a number > 0), 'measure' or None."
        )
    for name, meaning in FLAGS.items():
        if not isinstance(a[name], (bool, np.bool_)):
            raise ValueError(
                f"Unsupported value `XLATuner({name}={a[name]!r})`: pass True "
                f"({meaning}) or False."
            )
    validate_budget(as_int(a["trial_budget"]))
    budget = as_int(a["max_recompilations"])
    if budget is not None and (
        not isinstance(budget, int) or isinstance(budget, bool) or budget < 1
    ):
        raise ValueError(
            f"Unsupported value `XLATuner(max_recompilations={budget!r})`: "
            "pass the recompilations a step function may make before the "
            f"guard acts (an integer >= 1, e.g. {guard.DEFAULT_BUDGET}), or "
            "None for no guard."
        )
    if mixed_precision not in (None, AUTO):
        precision_lib.float_policy(mixed_precision, "XLATuner(mixed_precision")


def as_int(value: Any) -> Any:
    """A numpy integer as a Python int (anything else unchanged)."""
    return int(value) if isinstance(value, np.integer) else value


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


# The fields of `Settings` that are XLATuner's arguments.
ARGUMENTS = tuple(
    f.name
    for f in dataclasses.fields(Settings)
    if f.name not in ("flag_problems", "cache_status")
)
