"""keras_xla: make XLA pay off for Keras 3 training on TensorFlow.

Public names are imported on first use, so `keras-xla report` and the
stdlib-only report module load without starting TensorFlow.
"""

import importlib

from keras_xla.tf_backend import compile_ledger as _compile_ledger
from keras_xla.tf_backend import flag_guard as _flag_guard

__version__ = "0.1.0"

# Before TensorFlow reads TF_XLA_FLAGS (at its first op): fix the flags it
# would abort on (see flag_guard), then record XLA's compilations, so the
# HLO analysis costs none (see compile_ledger).
_flag_guard.guard(tensorflow_started=_compile_ledger.tensorflow_started())
_compile_ledger.install()

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
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
