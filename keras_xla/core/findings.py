"""Findings: the table of codes, and a book that records each cause once.

A finding is one diagnosed problem with a stable, kebab-case `code` that
tests and users match on (never the message text). Every code the library
emits is defined here, with its severity and what it is about. The
`FindingBook` keys a finding by its code and its *place* (function, input,
dimension, layer, flag...), not by its message: a message that carries a
measured number (a median, a count) changes every epoch, and the same
cause must still be recorded and warned about once.
"""

from __future__ import annotations

import os
import sys
import warnings

from keras_xla.core.report import Finding

# Recompilation causes (see `core.signatures.CAUSES`).
PARTIAL_LAST_BATCH = "partial-last-batch"
BATCH_SIZE_CHANGE = "batch-size-change"
DYNAMIC_DIMENSION = "dynamic-dimension"
DTYPE_CHANGE = "dtype-change"
RANK_CHANGE = "rank-change"
NEW_INPUT = "new-input"
REMOVED_INPUT = "removed-input"
RETRACE = "retrace"
# Why XLA is off.
JIT_DISABLED_BY_LAYER = "jit-disabled-by-layer"
JIT_DISABLED_BY_DETERMINISM = "jit-disabled-by-determinism"
JIT_DISABLED_RUN_EAGERLY = "jit-disabled-run-eagerly"
JIT_DISABLED_BY_STRATEGY = "jit-disabled-by-strategy"
JIT_DISABLED_BY_BACKEND = "jit-disabled-by-backend"
UNSUPPORTED_OP = "unsupported-op"
AUTO_CLUSTERING_INACTIVE = "auto-clustering-inactive"
AUTO_CLUSTERING_UNCOUNTED = "auto-clustering-uncounted"
# Cost and speed.
DISPATCH_BOUND_STEPS = "dispatch-bound-steps"
COMPILE_DOMINATES = "compile-dominates"
TENSOR_CORE_ALIGNMENT = "tensor-core-alignment"
TUNER_OVERHEAD = "tuner-overhead"
INPUT_BOUND = "input-bound"
RECOMPILE_STORM = "recompile-storm"
BUCKET_REFUSED = "bucket-refused"
# A job across workers (`core.job`: the chief's job report).
WORKER_MISSING = "worker-missing"
WORKER_COMPILED_ALONE = "worker-compiled-alone"
WORKER_PROGRAM_DIFFERS = "worker-program-differs"
STRAGGLER = "straggler"
LOG_DIR_SHARED = "log-dir-shared"
# Precision.
POLICY_SET_AFTER_BUILD = "policy-set-after-build"
LOW_PRECISION_OUTPUT = "low-precision-output"
MISSING_LOSS_SCALE = "missing-loss-scale"
FLOAT16_ON_CPU = "float16-on-cpu"
BF16_WITHOUT_HARDWARE_SUPPORT = "bf16-without-hardware-support"
# Flags.
UNKNOWN_XLA_FLAG = "unknown-xla-flag"
XLA_FLAG_WRONG_VARIABLE = "xla-flag-wrong-variable"
NEGATED_XLA_FLAG = "negated-xla-flag"
XLA_FLAG_MISSING_VALUE = "xla-flag-missing-value"
INVALID_XLA_FLAG_VALUE = "invalid-xla-flag-value"
IGNORED_XLA_FLAG_TEXT = "ignored-xla-flag-text"
MISSING_XLA_FLAGS_FILE = "missing-xla-flags-file"
# The tuner's own machinery.
COMPILE_CACHE_INACTIVE = "compile-cache-inactive"
PROFILER_BUSY = "profiler-busy"
HLO_ANALYSIS_FAILED = "hlo-analysis-failed"
HLO_ANALYSIS_OFF = "hlo-analysis-off"
TRIAL_SKIPPED = "trial-skipped"
TUNER_ERROR = "tuner-error"
NO_STEPS = "no-steps"
OUTPUT_FAILED = "output-failed"
DUPLICATE_TUNER = "duplicate-tuner"
COMPILE_CACHE_CORRUPT = "compile-cache-corrupt"
COMPILE_CACHE_READ_ONLY = "compile-cache-read-only"
COMPILE_CACHE_UNTRUSTED = "compile-cache-untrusted"
COMPILE_CACHE_NOT_SAVED = "compile-cache-not-saved"
COMPILE_LEDGER_OFF = "compile-ledger-off"
FOLDED_DIMENSIONS = "folded-dimensions"
# The backend and the devices.
INDIVISIBLE_BATCH = "indivisible-batch"
BACKEND_UNSUPPORTED = "backend-unsupported"

# Each code: its severity, and the subject it is about.
CODES: dict[str, tuple[str, str]] = {
    PARTIAL_LAST_BATCH: ("warning", "a short last batch recompiled"),
    BATCH_SIZE_CHANGE: ("warning", "the batch size changed mid-run"),
    DYNAMIC_DIMENSION: ("warning", "a non-batch dimension changed"),
    DTYPE_CHANGE: ("warning", "an input's dtype changed"),
    RANK_CHANGE: ("warning", "an input's rank changed"),
    NEW_INPUT: ("warning", "an input appeared"),
    REMOVED_INPUT: ("warning", "an input disappeared"),
    RETRACE: ("warning", "the step was traced again"),
    JIT_DISABLED_BY_LAYER: ("warning", "a layer keeps XLA off"),
    JIT_DISABLED_BY_DETERMINISM: ("warning", "op determinism keeps XLA off"),
    JIT_DISABLED_RUN_EAGERLY: ("warning", "run_eagerly keeps XLA off"),
    JIT_DISABLED_BY_STRATEGY: ("warning", "a strategy keeps XLA off"),
    JIT_DISABLED_BY_BACKEND: ("warning", "the Keras backend is not TF"),
    UNSUPPORTED_OP: ("warning", "an op has no XLA kernel"),
    AUTO_CLUSTERING_INACTIVE: ("warning", "auto-clustering asked, not on"),
    AUTO_CLUSTERING_UNCOUNTED: ("warning", "clusters compile uncounted"),
    DISPATCH_BOUND_STEPS: ("info", "launching a step costs as much as it"),
    TUNER_OVERHEAD: ("info", "the tuner's own work is over 1% of a step"),
    INPUT_BOUND: ("warning", "a large share of each step waits for data"),
    COMPILE_DOMINATES: ("warning", "compiling costs more than it saves"),
    RECOMPILE_STORM: ("warning", "a step kept compiling for new shapes"),
    BUCKET_REFUSED: ("warning", "padding to buckets could change results"),
    TENSOR_CORE_ALIGNMENT: ("info", "sizes keep tensor cores idle"),
    POLICY_SET_AFTER_BUILD: ("warning", "the policy came after the build"),
    LOW_PRECISION_OUTPUT: ("warning", "the output computes in low precision"),
    MISSING_LOSS_SCALE: ("warning", "float16 without loss scaling"),
    FLOAT16_ON_CPU: ("warning", "float16 on a CPU"),
    BF16_WITHOUT_HARDWARE_SUPPORT: ("warning", "bfloat16 without hardware"),
    UNKNOWN_XLA_FLAG: ("error", "a flag TensorFlow does not know"),
    XLA_FLAG_WRONG_VARIABLE: ("error", "a flag in the other variable"),
    NEGATED_XLA_FLAG: ("error", "a --no form that does not exist"),
    XLA_FLAG_MISSING_VALUE: ("error", "a flag without its value"),
    INVALID_XLA_FLAG_VALUE: ("error", "a flag value TF rejects"),
    IGNORED_XLA_FLAG_TEXT: ("error", "text TensorFlow ignores"),
    MISSING_XLA_FLAGS_FILE: ("error", "a flags file that does not exist"),
    COMPILE_CACHE_INACTIVE: ("warning", "the compile cache flag came late"),
    PROFILER_BUSY: ("info", "the profiler window could not run"),
    HLO_ANALYSIS_FAILED: ("info", "the HLO analysis failed"),
    HLO_ANALYSIS_OFF: ("info", "no free source of the step's HLO"),
    TRIAL_SKIPPED: ("warning", "the XLA/precision trial did not decide"),
    TUNER_ERROR: ("error", "the tuner failed; training went on"),
    NO_STEPS: ("warning", "an epoch trained no step"),
    OUTPUT_FAILED: ("error", "an output could not be written"),
    DUPLICATE_TUNER: ("warning", "a second XLATuner on one fit stood aside"),
    COMPILE_CACHE_CORRUPT: ("warning", "corrupt cache entries set aside"),
    COMPILE_CACHE_READ_ONLY: ("info", "the cache is read, not written"),
    COMPILE_CACHE_UNTRUSTED: ("warning", "others could write cache files"),
    COMPILE_CACHE_NOT_SAVED: ("warning", "new entries could not be saved"),
    COMPILE_LEDGER_OFF: ("info", "XLA's compilations are not recorded"),
    FOLDED_DIMENSIONS: ("info", "dimensions past 30 recorded as one hash"),
    INDIVISIBLE_BATCH: ("error", "a batch does not divide over the devices"),
    BACKEND_UNSUPPORTED: ("warning", "a TensorFlow-only feature, not applied"),
    WORKER_MISSING: ("warning", "a job's worker wrote no report"),
    WORKER_COMPILED_ALONE: ("warning", "one worker compiled, the rest waited"),
    WORKER_PROGRAM_DIFFERS: ("error", "workers compiled different programs"),
    STRAGGLER: ("warning", "one worker's step is slower than the others'"),
    LOG_DIR_SHARED: ("warning", "another fit was writing into the log dir"),
}


def severity(code: str) -> str:
    """The severity of a known code (`ValueError` for an unknown one)."""
    if code not in CODES:
        raise ValueError(
            f"Unknown finding code {code!r}: add it to "
            "keras_xla.core.findings.CODES."
        )
    return CODES[code][0]


class XLARecompilationWarning(UserWarning):
    """XLA compiled a step again because an input's shape or dtype drifted."""


class XLAUnsupportedOpError(ValueError):
    """The step holds ops XLA cannot compile (`on_unsupported="raise"`)."""


RECOMPILATION_CODES = frozenset(
    {
        PARTIAL_LAST_BATCH,
        BATCH_SIZE_CHANGE,
        DYNAMIC_DIMENSION,
        DTYPE_CHANGE,
        RANK_CHANGE,
        NEW_INPUT,
        REMOVED_INPUT,
        RETRACE,
    }
)
# Frames in these folders are the library's and Keras's, not the user's.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_PACKAGES = ("keras", "tensorflow", "tf_keras")


def user_stacklevel() -> int:
    """The `stacklevel` that makes a warning point at the first frame
    outside keras_xla, Keras and TensorFlow (the user's `fit` call),
    counted from the caller of `warnings.warn`."""
    frame, level = sys._getframe(1), 1
    while frame is not None and _is_library(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def _is_library(filename: str) -> bool:
    if filename.startswith((_PACKAGE_DIR + os.sep, "<frozen")):
        return True
    parts = os.path.normpath(filename).split(os.sep)
    return any(p in parts for p in _LIBRARY_PACKAGES) and any(
        p in ("site-packages", "dist-packages") for p in parts
    )


class FindingBook:
    """Records findings into a report's list (`findings`, appended to),
    once per code and place."""

    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        self._by_key: dict[tuple, Finding] = {}

    def add(
        self,
        code: str,
        message: str,
        fix: str,
        place: tuple = (),
        compile_seconds: float = 0.0,
    ) -> Finding:
        """Records a finding of `code` (one of `CODES`): what happened,
        where, at what cost (`message`) and what to change (`fix`); warns
        the first time only. Counts it again when its code and `place` (a
        cause's place: `(function, input, dim)`, a layer, a flag; `()`:
        one per code) were seen before, the message then naming the count
        and compile seconds of recompilation causes."""
        key = (code, *place)
        recompiling = code in RECOMPILATION_CODES
        finding = self._by_key.get(key)
        if finding is None:
            finding = Finding(code, severity(code), message, fix, 0, 0.0)
            self._by_key[key] = finding
            self.findings.append(finding)
            warnings.warn(
                f"[{code}] {message} Fix: {fix}",
                XLARecompilationWarning if recompiling else UserWarning,
                stacklevel=user_stacklevel(),
            )
        finding.count += 1
        finding.compile_seconds = round(
            finding.compile_seconds + compile_seconds, 4
        )
        if recompiling and finding.count > 1:
            finding.message = (
                f"{message} Seen {finding.count} times, "
                f"{finding.compile_seconds:.2f} s of compiling."
            )
        return finding

    def revise(self, code: str, found: tuple[str, str] | None) -> None:
        """Keeps a finding that a later measurement may revise true: with
        `found` (`(message, fix)`), recorded (warned the first time) or
        reworded; without, withdrawn. Place-less codes only."""
        finding = self._by_key.get((code,))
        if found is None:
            if finding is not None:
                del self._by_key[(code,)]
                self.findings.remove(finding)
        elif finding is None:
            self.add(code, *found)
        else:
            finding.message, finding.fix = found
