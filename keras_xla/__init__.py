"""keras_xla: make XLA pay off for Keras 3 training on TensorFlow."""

from keras_xla.accounting import XLARecompilationWarning
from keras_xla.compile_cache import clear_compile_cache, enable_compile_cache
from keras_xla.report import XLAReport
from keras_xla.train_step import XLAModel
from keras_xla.tuner import XLATuner

__version__ = "0.1.0"

__all__ = [
    "clear_compile_cache",
    "enable_compile_cache",
    "XLAModel",
    "XLARecompilationWarning",
    "XLAReport",
    "XLATuner",
    "__version__",
]
