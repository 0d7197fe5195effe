"""The one place that picks the Keras backend and hands out its parts.

keras_xla serves Keras's TensorFlow and JAX backends. Which one this
process uses is decided here, once, and every other module asks here for
the backend's part (the fit's adapter, the compile cache, `keras-xla
doctor`'s checks, `XLAModel`, the flag checks, what the decision memory
records of the machine); no other module branches on the backend's name.
Each part is imported only when asked for, so the JAX path never imports
TensorFlow.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

TENSORFLOW, JAX = "tensorflow", "jax"

# Each backend's package (a part is a module there) and fit adapter.
_PACKAGES = {
    TENSORFLOW: ("keras_xla.tf_backend", "TFFitAdapter"),
    JAX: ("keras_xla.jax_backend", "JaxFitAdapter"),
}


def name() -> str:
    """The Keras backend this process uses, without importing Keras: the
    imported Keras's, else `KERAS_BACKEND`, else Keras's config file,
    else TensorFlow (Keras's default)."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        return keras.backend.backend()
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(
        os.path.expanduser("~"), ".keras"
    )
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as f:
            return str(json.load(f).get("backend", TENSORFLOW))
    except (OSError, ValueError, AttributeError):
        return TENSORFLOW


def unserved(backend: str | None = None) -> tuple[str, str] | None:
    """Why keras_xla cannot drive XLA on `backend` (this process's by
    default), as `(reason, fix)`; None on a backend it serves."""
    backend = backend or name()
    if backend in (TENSORFLOW, JAX):
        return None
    return (
        f"the Keras backend is {backend!r}; keras_xla drives XLA on the "
        "TensorFlow and JAX backends only",
        "Set KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax before "
        "importing keras.",
    )


def _part(part: str) -> Any:
    """The backend's `part` module: JAX's on JAX, TensorFlow's otherwise
    (a backend keras_xla does not serve finds its findings there)."""
    return importlib.import_module(f"{_package()[0]}.{part}")


def _package() -> tuple[str, str]:
    """This backend's package and adapter class (`_PACKAGES`)."""
    return _PACKAGES[JAX if name() == JAX else TENSORFLOW]


def fit_adapter() -> type:
    """What one `fit` needs of this backend (`fit_adapter.FitAdapter`)."""
    return getattr(_part("fit_adapter"), _package()[1])


def worker(model: Any) -> Any:
    """This process's `core.workers.Worker` in a job of several workers
    training `model`, or None."""
    return _part("environment").worker(model)


def doctor() -> Any:
    """`keras-xla doctor`'s checks (`collect_diagnosis`,
    `render_diagnosis`)."""
    return _part("doctor")


def xla_model() -> type:
    """`keras_xla.XLAModel`: TensorFlow's per-replica model, or a stand-in
    that says what to use instead."""
    return _part("xla_model").XLAModel


def enable_compile_cache(directory: Any, trust_shared: bool = False) -> Any:
    """Turns the backend's persistent compile cache on for this process;
    returns its `CacheStatus`."""
    return _part("compile_cache").enable_compile_cache(
        directory, trust_shared=trust_shared
    )


def clear_compile_cache(directory: Any) -> int:
    """Deletes the backend's entries in a compile cache directory; returns
    how many were removed."""
    return _part("compile_cache").clear_compile_cache(directory)


def flag_problems() -> list:
    """The XLA flag variables' problems (TensorFlow reads them; on JAX
    `XLA_FLAGS` is JAX's own and checked by JAX)."""
    if name() == JAX:
        return []
    from keras_xla.tf_backend import flags

    return flags.check_flags()


def raise_for_flags() -> None:
    """`strict=True`: raises `ValueError` for flags TensorFlow would abort
    on or that keras_xla fixed at import (nothing on JAX)."""
    if name() == JAX:
        return
    from keras_xla.tf_backend import flag_guard, flags

    flags.validate_flags()
    error = flag_guard.strict_error()
    if error:
        raise ValueError(error)


def at_import() -> None:
    """What `import keras_xla` does for the backend: on TensorFlow, fix
    the flags TensorFlow would abort on and set up the compile ledger
    before TensorFlow's first op; on another backend nothing (nothing of
    TensorFlow's is loaded, and its flags are left alone)."""
    if name() != TENSORFLOW:
        return
    from keras_xla.tf_backend import compile_ledger, flag_guard

    flag_guard.guard(tensorflow_started=compile_ledger.tensorflow_started())
    compile_ledger.install()
    compile_ledger.remove_stale_ledgers()


def user_environment() -> dict[str, str]:
    """This process's environment as the user set it, for a child that
    picks its own backend: without the compile ledger's flag `import
    keras_xla` added for TensorFlow (the user's `TF_XLA_FLAGS` back)."""
    env = dict(os.environ)
    ledger = sys.modules.get("keras_xla.tf_backend.compile_ledger")
    if ledger is not None and ledger.status().owned:
        env.pop("TF_XLA_FLAGS", None)
        if ledger.status().user_flags is not None:
            env["TF_XLA_FLAGS"] = ledger.status().user_flags
    return env


def set_auto_clustering(on: bool) -> None:
    """Turns TensorFlow's auto-clustering (`set_jit`) on or off (the
    trial's candidates; only TensorFlow has it)."""
    from keras_xla.tf_backend import autoclustering

    autoclustering.set_jit(on)


def auto_clustering() -> bool | None:
    """Whether TensorFlow's auto-clustering (`set_jit`) is on; None off
    TensorFlow, where there is none."""
    return _part("environment").auto_clustering()


def device_infos(devices: Any = None) -> list:
    """The backend's devices (or `devices`, the backend's own device
    objects or `DeviceInfo`s) as `core.hardware.DeviceInfo`s."""
    return _part("environment").device_infos(devices)


def machine() -> tuple[list[str], str]:
    """This process's devices and the backend's version, for what the
    decision memory keys a decision on."""
    return _part("environment").machine()
