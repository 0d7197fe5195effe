"""keras_xla: make XLA pay off for Keras 3 training on TensorFlow and JAX.

Public names are imported on first use, so `keras-xla report` and the
stdlib-only report module load without starting TensorFlow.
"""

import importlib

from keras_xla import backends as _backends

__version__ = "0.1.0"

# Before TensorFlow's first op: the flags it would abort on, the ledger.
_backends.at_import()

_EXPORTS = {
    "XLAModel": "keras_xla.backends",
    "XLARecompilationWarning": "keras_xla.core.findings",
    "XLARecompileStormError": "keras_xla.core.guard",
    "XLAUnsupportedOpError": "keras_xla.core.findings",
    "XLAReport": "keras_xla.core.report",
    "XLATuner": "keras_xla.tuner",
    "check_flags": "keras_xla.tf_backend.flags",
    "hlo_dump_env": "keras_xla.tf_backend.flags",
    "read_compile_events": "keras_xla.tf_backend.profiler",
    "recommend_policy": "keras_xla.precision",
    "clear_compile_cache": "keras_xla.backends",
    "enable_compile_cache": "keras_xla.backends",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_xla' has no attribute {name!r}")
    if name == "XLAModel":
        value = _backends.xla_model()  # off TensorFlow: says what to use
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
