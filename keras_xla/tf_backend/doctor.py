"""`keras-xla doctor`: can XLA work here, and how well?

Versions, devices, CPU features, the XLA flag variables (checked before any
TensorFlow op: a bad `TF_XLA_FLAGS` aborts the process at its first op), op
determinism and a timed compile, as a JSON-ready dict and as text.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time
from typing import Any

from keras_xla import backends
from keras_xla.core import diagnosis_text, hardware
from keras_xla.tf_backend import compile_ledger, flag_guard
from keras_xla.tf_backend import flags as flags_lib
from keras_xla.tf_backend import flops as flops_lib
from keras_xla.tf_backend import jit as jit_lib

# CPU flags (as /proc/cpuinfo names them) that decide XLA's CPU code
# generation and whether bfloat16 math is native.
X86_FEATURES = tuple(
    "sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 "
    "avx512_fp16 amx_tile amx_bf16 amx_int8".split()
)
ARM_FEATURES = tuple("asimd asimdhp sve sve2 bf16 i8mm".split())
BUILD_KEYS = ("cpu_compiler", "is_cuda_build", "cuda_version", "is_rocm_build")
# The doctor's rows: key in the JSON -> label in the text.
DOCTOR_LABELS = {
    "python": "Python",
    "tensorflow": "TensorFlow",
    "tensorflow_build": "TensorFlow build",
    "xla": "XLA build",
    "keras": "Keras",
    "keras_backend": "Keras backend",
    "dtype_policy": "Dtype policy",
    "physical_devices": "Physical devices",
    "logical_devices": "Logical devices",
    "cpu_features": "CPU features",
    "cpu_features_absent": "CPU features absent",
    "TF_XLA_FLAGS": "TF_XLA_FLAGS",
    "XLA_FLAGS": "XLA_FLAGS",
    "deterministic_ops": "Deterministic ops",
    "smoke_compile": "Smoke compile",
    "peak_tflops": "Peak TFLOP/s (f32)",
    "compile_ledger": "Compile ledger",
}


def cpu_features(cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The XLA-relevant CPU features in `/proc/cpuinfo`, as lists
    `{"present": [...], "absent": [...]}`; both `"unknown"` where the
    file cannot be read (not Linux)."""
    words = hardware.cpu_flags(cpuinfo_path)
    if not words:
        return {"present": "unknown", "absent": "unknown"}
    arm = platform.machine().lower() in ("aarch64", "arm64")
    relevant = ARM_FEATURES if arm else X86_FEATURES
    return {
        "present": [f for f in relevant if f in words],
        "absent": [f for f in relevant if f not in words],
    }


def _smoke_compile() -> dict[str, Any]:
    """Times a tiny XLA matmul: the first call compiles, later ones run."""
    import tensorflow as tf

    matmul = tf.function(jit_compile=True)(lambda a, b: tf.matmul(a, b))
    ones = tf.ones((64, 64))
    seconds = []
    for _ in range(3):  # Compile, warm-up, timed run.
        start = time.perf_counter()
        product = matmul(ones, ones).numpy()
        seconds.append(time.perf_counter() - start)
    return {  # Compile = first call (trace + XLA compile + run) - a run.
        "compile_seconds": round(seconds[0] - seconds[2], 4),
        "first_call_seconds": round(seconds[0], 4),
        "later_call_ms": round(seconds[2] * 1000, 3),
        "result_ok": bool((product == 64.0).all()),
    }


def _op_determinism() -> bool | None:
    try:
        return jit_lib.op_determinism_enabled()
    except Exception:  # noqa: BLE001 - diagnostics never raise.
        return None


def _ledger_text() -> str:
    ledger = compile_ledger.status()
    if ledger.directory is None:
        return f"off: {ledger.reason}"
    owner = "this process's" if ledger.owned else "the compile cache"
    return f"{ledger.directory} ({owner})"


def _runtime(skip_compile: bool) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    build = dict(tf.sysconfig.get_build_info())
    features = cpu_features()
    info = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "tensorflow": tf.__version__,
        "tensorflow_build": f"{tf.version.GIT_VERSION}, "
        f"{tf.version.COMPILER_VERSION}",
        "xla": {"built_with_xla": tf.test.is_built_with_xla()}
        | {k: v for k, v in build.items() if k in BUILD_KEYS},
        "keras": keras.__version__,
        "keras_backend": keras.backend.backend(),
        "dtype_policy": keras.config.dtype_policy().name,
        "physical_devices": [d.name for d in tf.config.list_physical_devices()],
        "logical_devices": [d.name for d in tf.config.list_logical_devices()],
        "cpu_features": features["present"],
        "cpu_features_absent": features["absent"],
        "deterministic_ops": _op_determinism(),
        "smoke_compile": {"skipped": "bad XLA flags would abort the process"},
        "peak_tflops": None,
        "compile_ledger": _ledger_text(),
    }
    if not skip_compile:
        try:
            info["smoke_compile"] = _smoke_compile()
            # Measured once per machine and kept: XLATuner's utilization
            # figure reads it without compiling anything.
            peak = flops_lib.measured_peak_flops("float32")
            info["peak_tflops"] = round(peak / 1e12, 4)
        except Exception as error:  # noqa: BLE001 - keep the doctor alive.
            info["smoke_compile"] = {"error": repr(error)}
    return info


def collect_diagnosis() -> dict[str, Any]:
    """Everything `keras-xla doctor` shows, as a JSON-ready dict.

    The flag variables are checked before any TensorFlow op. A variable
    with a problem TensorFlow would abort on is unset while the runtime
    checks run and restored after, and the smoke compile is skipped;
    ignored trailing text is only reported.
    """
    # The variables as the user set them, before keras_xla's import fixed
    # what TensorFlow would abort on (flag_guard).
    values = flag_guard.original(compile_ledger.user_environment())
    flag_problems = flags_lib.check_flags(
        {k: v for k, v in values.items() if v is not None}
    )
    # What would still abort now (not ignored text): unset for the checks.
    fatal = [
        p for p in flags_lib.check_flags() if p.code not in flags_lib.HARMLESS
    ]
    unset = sorted({p.variable for p in fatal})
    current = {v: os.environ.pop(v) for v in unset}
    try:
        diagnosis = _runtime(skip_compile=bool(fatal))
    finally:
        os.environ.update(current)
    diagnosis.update(values)
    diagnosis["flag_problems"] = [dataclasses.asdict(p) for p in flag_problems]
    diagnosis["unset_for_checks"] = unset
    problems = [f"{p.variable}: {p.message}" for p in flag_problems]
    if "error" in diagnosis["smoke_compile"]:
        problems.append(f"Smoke compile failed: {diagnosis['smoke_compile']}")
    notes = []
    unserved = backends.unserved(diagnosis["keras_backend"])
    if unserved is not None:
        notes.append(f"keras_xla cannot work here: {unserved[0]}.")
    if diagnosis["deterministic_ops"]:
        notes.append("Op determinism is on: Keras keeps jit_compile off.")
    diagnosis.update(notes=notes, problems=problems, healthy=not problems)
    return diagnosis


def render_diagnosis(diagnosis: dict[str, Any]) -> str:
    """The doctor's dict as aligned `name  value` lines, then problems."""
    lines = ["keras-xla doctor"]
    lines += diagnosis_text.label_rows(DOCTOR_LABELS, diagnosis)
    for problem in diagnosis["flag_problems"]:
        lines.append(f"  Flag problem [{problem['code']}] {problem['flag']}")
        lines.append(f"    {problem['message']}")
        if problem["suggestion"]:
            lines.append(f"    Fix: set {problem['suggestion']}")
    if diagnosis["unset_for_checks"]:
        unset = " and ".join(diagnosis["unset_for_checks"])
        lines.append(f"  (devices were listed with {unset} unset)")
    lines += [f"  Note: {note}" for note in diagnosis["notes"]]
    lines.append(diagnosis_text.status_line(len(diagnosis["problems"])))
    return "\n".join(lines)
