"""`keras-xla doctor` on Keras's JAX backend: versions, devices, the
persistent compile cache's settings and a timed compile, without
TensorFlow."""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

from keras_xla.core import diagnosis_text
from keras_xla.jax_backend import compile_cache
from keras_xla.jax_backend.compile_events import CompileEvents

DOCTOR_LABELS = {
    "python": "Python",
    "keras": "Keras",
    "keras_backend": "Keras backend",
    "jax": "JAX",
    "jaxlib": "jaxlib",
    "platform": "JAX platform",
    "devices": "JAX devices",
    "dtype_policy": "Dtype policy",
    "XLA_FLAGS": "XLA_FLAGS",
    "compile_cache": "JAX compile cache",
    "smoke_compile": "Smoke compile",
}


def _smoke_compile() -> dict[str, Any]:
    """One small jitted function: JAX's own compile seconds for it."""
    import jax
    import jax.numpy as jnp

    events = CompileEvents()
    events.install()
    start = time.perf_counter()
    try:
        value = jax.jit(lambda v: jnp.tanh(v @ v.T).sum())(jnp.ones((8, 8)))
        value.block_until_ready()
    finally:
        events.remove()
    return {
        "seconds": round(time.perf_counter() - start, 4),
        "compilations": events.other_compilations,
        "compile_seconds": round(events.other_seconds, 4),
    }


def collect_diagnosis() -> dict[str, Any]:
    """Everything `keras-xla doctor` shows on JAX, as a JSON-ready dict."""
    import jax
    import jaxlib
    import keras

    devices = jax.devices()
    diagnosis = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "keras": keras.__version__,
        "keras_backend": keras.backend.backend(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "platform": devices[0].platform if devices else None,
        "devices": [str(d) for d in devices],
        "dtype_policy": keras.config.dtype_policy().name,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
        "compile_cache": {
            name: getattr(jax.config, name, None)
            for name in compile_cache.OPTIONS
        },
    }
    problems = []
    try:
        diagnosis["smoke_compile"] = _smoke_compile()
    except Exception as error:  # noqa: BLE001 - keep the doctor alive
        diagnosis["smoke_compile"] = {"error": repr(error)}
        problems.append(f"Smoke compile failed: {error!r}")
    notes = [
        "XLAModel, keras_xla.data (tf.data), auto-clustering and "
        "profile_steps are TensorFlow features; XLATuner, its 'auto' "
        "trial and its baseline work on JAX."
    ]
    if not diagnosis["compile_cache"].get("jax_compilation_cache_dir"):
        notes.append(
            "No persistent compile cache: pass XLATuner(compile_cache=DIR) "
            "to keep compiled steps across processes."
        )
    diagnosis.update(notes=notes, problems=problems, healthy=not problems)
    return diagnosis


def render_diagnosis(diagnosis: dict[str, Any]) -> str:
    """The doctor's dict as aligned `name  value` lines, then problems."""
    lines = ["keras-xla doctor (JAX)"]
    lines += diagnosis_text.label_rows(DOCTOR_LABELS, diagnosis)
    lines += [f"  Note: {note}" for note in diagnosis["notes"]]
    lines += [f"  Problem: {p}" for p in diagnosis["problems"]]
    lines.append(diagnosis_text.status_line(len(diagnosis["problems"])))
    return "\n".join(lines)
