"""keras_xla: make XLA pay off for Keras 3 training on TensorFlow.

Public names are imported on first use, so `keras-xla report` and the
stdlib-only report module load without starting TensorFlow.
"""

import importlib
import json as _json
import os as _os
import sys as _sys

from keras_xla.tf_backend import compile_ledger as _compile_ledger
from keras_xla.tf_backend import flag_guard as _flag_guard

__version__ = "0.1.0"


def _keras_backend() -> str:
    """The Keras backend this process will use, without importing Keras:
    the imported Keras's, else `KERAS_BACKEND`, else Keras's config."""
    keras = _sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        return keras.backend.backend()
    if _os.environ.get("KERAS_BACKEND"):
        return _os.environ["KERAS_BACKEND"]
    home = _os.environ.get("KERAS_HOME") or _os.path.join(
        _os.path.expanduser("~"), ".keras"
    )
    try:
        with open(_os.path.join(home, "keras.json"), encoding="utf-8") as f:
            return str(_json.load(f).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


# Before TensorFlow reads TF_XLA_FLAGS (at its first op): fix the flags it
# would abort on (see flag_guard), then record XLA's compilations in
# memory, so the HLO analysis costs none (see compile_ledger). On another
# Keras backend TensorFlow's flags are left alone.
_BACKEND = _keras_backend()
if _BACKEND == "tensorflow":
    _flag_guard.guard(tensorflow_started=_compile_ledger.tensorflow_started())
    _compile_ledger.install()
    _compile_ledger.remove_stale_ledgers()
else:
    _compile_ledger.leave_off(
        f"the Keras backend is {_BACKEND}, so TensorFlow's flags are left alone"
    )

_EXPORTS = {
    "XLAModel": "keras_xla.model",
    "XLARecompilationWarning": "keras_xla.core.findings",
    "XLAReport": "keras_xla.core.report",
    "XLATuner": "keras_xla.tuner",
    "check_flags": "keras_xla.tf_backend.flags",
    "hlo_dump_env": "keras_xla.tf_backend.flags",
    "read_compile_events": "keras_xla.tf_backend.profiler",
    "recommend_policy": "keras_xla.tf_backend.precision",
    "clear_compile_cache": "keras_xla.tf_backend.compile_cache",
    "enable_compile_cache": "keras_xla.tf_backend.compile_cache",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_xla' has no attribute {name!r}")
    if name == "XLAModel" and _keras_backend() != "tensorflow":
        module = "keras_xla.jax_backend.xla_model"  # says what to use
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
