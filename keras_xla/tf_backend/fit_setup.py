"""A fit's setup: the model put in the requested XLA and precision
configuration, and the report's opening sections.

`configure` applies `XLATuner(mixed_precision=..., jit_compile=...)` to
the live model (where it can work) and returns what the report starts
with: the environment, the XLA section (on or off, and why), the compile
cache's section and the findings found on the way. The fit's owner puts
them in the report; nothing here holds state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_xla import precision as precision_lib
from keras_xla.auto.policy import AUTO
from keras_xla.core import cache_directory
from keras_xla.core.report import JitInfo
from keras_xla.settings import Settings
from keras_xla.tf_backend import compile_cache as cache_lib
from keras_xla.tf_backend import environment as environment_lib
from keras_xla.tf_backend import flag_guard
from keras_xla.tf_backend import jit as jit_lib


@dataclasses.dataclass
class Setup:
    """The report's opening sections, and `(code, message, fix, place)`
    findings (`place` empty: keyed by the code alone)."""

    environment: dict
    jit: JitInfo
    compile_cache: Any = None
    findings: list = dataclasses.field(default_factory=list)


def configure(settings: Settings, model: Any) -> Setup:
    """Applies the requested precision policy and XLA setting to `model`
    ("auto" asks for XLA on: the trial turns it off where it loses).

    Raises:
        ValueError: With `strict=True` and `jit_compile=True`, when XLA
            cannot be on for this model (the reason and the fix named).
    """
    s, findings = settings, []
    if s.mixed_precision not in (None, AUTO):
        precision_lib.apply_policy(model, s.mixed_precision)
    for f in precision_lib.check_precision(model):
        findings.append((f.code, f.message, f.fix, (f.message,)))
    environment = environment_lib.describe_environment(model)
    requested = True if s.jit_compile == AUTO else s.jit_compile
    info, cause = jit_lib.configure_jit(model, requested)
    info.requested = s.jit_compile
    if cause is not None:
        code, reason, fix = cause
        if s.strict and s.jit_compile is True:
            raise ValueError(f"XLA cannot be enabled: {reason}. {fix}")
        findings.append((code, f"XLA is off: {reason}.", fix, ()))
    # Bad XLA flags: found when the tuner was made, fixed at import.
    for bad in s.flag_problems:
        fix = bad.suggestion or "Remove the flag."
        findings.append((bad.code, bad.message, fix, (bad.variable, bad.flag)))
    findings += [flag_fix.finding() for flag_fix in flag_guard.FIXES]
    findings += cache_lib.setup_findings(s.cache_status)
    cache = None
    if s.cache_status is not None:
        cache = cache_directory.start_section(s.cache_status)
    return Setup(environment, info, cache, findings)
