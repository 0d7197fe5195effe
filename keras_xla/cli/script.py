"""A training script run under the tuner, without an edit of it.

`keras-xla run [options] script.py [args...]` (or `-m module`) runs the
script as `python script.py args` would: as `__main__`, with its own
`sys.argv` and its directory first on `sys.path`, in the working
directory it was started in, and its exit code. Before it runs, keras_xla
is imported (its compile ledger and flag checks are in force) and a hook
waits for Keras: once Keras's `Model` class is loaded, its `fit` adds an
`XLATuner` to every fit that has none (`FitHook`). Keras is never
imported before the script does it, so the backend the script picks
(`KERAS_BACKEND`) is the one it gets.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import inspect
import os
import runpy
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

from keras_xla.core import figures

MODEL_MODULE = "keras.src.models.model"


@dataclasses.dataclass
class ScriptFit:
    """One `Model.fit` the script ran: its name (`fit-<n>`), its log
    dir, and the tuner that watched it (the script's own, where it gave
    one)."""

    name: str
    log_dir: str | None
    tuner: Any
    added: bool
    # The fit's wall time, from its call to its return (None: it raised).
    seconds: float | None = None

    def figures(self) -> dict:
        """What a comparison reads of the fit; its steady step is the
        median of its epochs' medians (the first epoch's left out where
        there are others), with the range of those medians."""
        report = self.tuner.report
        epochs = [e for e in report.epochs if e.steps]
        medians = [
            e.step_time_ms.get("median")
            for e in (epochs[1:] if len(epochs) > 1 else epochs)
            if e.step_time_ms.get("median") is not None
        ]
        return {
            "name": self.name,
            "log_dir": self.log_dir,
            "added": self.added,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "steps": sum(e.steps for e in report.epochs),
            "backend": report.environment.get("backend"),
            "xla": bool(report.jit and report.jit.enabled),
            "compilations": report.total_compilations,
            "compile_seconds": round(report.total_compile_seconds, 3),
            "step_ms": statistics.median(medians) if medians else None,
            "step_ms_range": [min(medians), max(medians)] if medians else None,
            figures.DISPATCH.key: figures.DISPATCH.over(epochs),
            figures.INPUT_WAIT.key: figures.INPUT_WAIT.over(epochs),
            "codes": report.finding_codes(),
            "headline": report.verdict.headline if report.verdict else None,
        }


def stop_after_steps(steps: int) -> Any:
    """A Keras callback that ends a fit cleanly (`stop_training`) once it
    has trained `steps` train steps, counted from the batch-end hooks'
    step indices (no read of the model's variables)."""
    import keras

    class StopAfter(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.done = 0
            self.epoch_steps = 0

        def on_epoch_begin(self, epoch, logs=None):
            self.done += self.epoch_steps
            self.epoch_steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.epoch_steps = batch + 1
            if self.done + self.epoch_steps >= steps:
                self.model.stop_training = True

    return StopAfter()


class FitHook:
    """Adds `XLATuner(**arguments)` to each fit of Keras's models while
    it is installed: fit n of the script `name` writes under
    `<log_dir>/<name>/fit-<n>` (no files without `log_dir`) and ends
    after `steps` train steps, where given."""

    def __init__(
        self,
        log_dir: str | None,
        name: str,
        arguments: dict,
        steps: int | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.name = name
        self.arguments = dict(arguments)
        self.steps = steps
        self.fits: list[ScriptFit] = []
        self._patched: list[tuple[Any, Any]] = []
        self._finder: _KerasFinder | None = None

    def install(self) -> None:
        """Patches `Model.fit` now if Keras is loaded, else once it is."""
        module = sys.modules.get(MODEL_MODULE)
        if module is not None:
            self._patch(module.Model)
            return
        self._finder = _KerasFinder(self._patch)
        sys.meta_path.insert(0, self._finder)

    def uninstall(self) -> None:
        """Puts `Model.fit` back and removes the import hook."""
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        for cls, original in reversed(self._patched):
            if original is None:
                del cls.fit
            else:
                cls.fit = original
        self._patched.clear()

    def _patch(self, model_class: Any) -> None:
        original = model_class.__dict__.get("fit")
        fit = model_class.fit
        signature = inspect.signature(fit)

        def fit_under_tuner(model, *args, **kwargs):
            bound = signature.bind(model, *args, **kwargs)
            callbacks = list(bound.arguments.get("callbacks") or [])
            bound.arguments["callbacks"] = self._callbacks(callbacks)
            start = time.perf_counter()
            history = fit(*bound.args, **bound.kwargs)
            self.fits[-1].seconds = time.perf_counter() - start
            return history

        fit_under_tuner.__wrapped__ = fit
        fit_under_tuner.__doc__ = fit.__doc__
        model_class.fit = fit_under_tuner
        self._patched.append((model_class, original))

    def _callbacks(self, callbacks: list) -> list:
        from keras_xla.tuner import XLATuner

        name = f"fit-{len(self.fits) + 1}"
        tuner = next((c for c in callbacks if isinstance(c, XLATuner)), None)
        added = tuner is None
        if added:
            log_dir = None
            if self.log_dir:
                log_dir = os.path.join(self.log_dir, self.name, name)
            tuner = XLATuner(**{**self.arguments, "log_dir": log_dir})
            callbacks = [*callbacks, tuner]
        self.fits.append(ScriptFit(name, tuner.log_dir, tuner, added))
        if self.steps is not None:
            callbacks = [*callbacks, stop_after_steps(self.steps)]
        return callbacks


class _KerasFinder(importlib.abc.MetaPathFinder):
    """Calls `loaded(Model)` once Keras's model module has run."""

    def __init__(self, loaded) -> None:
        self.loaded = loaded

    def find_spec(self, name, path, target=None):
        if name != MODEL_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            self.loaded(module.Model)

        spec.loader.exec_module = exec_module
        return spec


def execute(
    target: str, args: Sequence[str], hook: FitHook, module: bool = False
) -> tuple[int, str | None]:
    """Runs the script at `target` (a module's name with `module`) as
    `__main__` with `args` as its arguments, `hook` installed; returns
    its exit code and, where it raised, its error's last line (None when
    it exited on its own). Its error's traceback is printed as Python
    prints it, from the script's first frame."""
    argv, path = sys.argv[:], sys.path[:]
    sys.argv = [target, *args]
    # As Python does: the script's folder first (`-m`: the working dir).
    first = os.getcwd() if module else os.path.dirname(os.path.abspath(target))
    sys.path.insert(0, first)
    hook.install()
    code, error = 0, None
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exit_:
        code = exit_code(exit_.code)
    except BaseException as raised:  # noqa: BLE001 - the script's own
        print_script_error(raised, target, module)  # first: it cannot fail
        code, error = 1, f"{type(raised).__name__}: {raised}"
    finally:
        hook.uninstall()
        sys.argv = argv
        sys.path[:] = path
    return code, error


def describe(fit: ScriptFit) -> str:
    """One line for a fit: its name, where its reports are, its
    verdict."""
    where = f" ({fit.log_dir})" if fit.log_dir else ""
    own = "" if fit.added else ", the script's own tuner"
    report = fit.tuner.report
    verdict = report.verdict.headline if report.verdict else None
    if not report.epochs:
        verdict = "it trained no epoch the tuner saw"
    return f"{fit.name}{where}{own}: {verdict or 'no verdict'}"


def exit_code(code: Any) -> int:
    """The process exit status `sys.exit(code)` gives: None 0, an int
    itself, anything else printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def print_script_error(error: BaseException, target: str, module: bool):
    """The traceback Python prints for `error`, without the frames above
    the script's (this module's, runpy's)."""
    tb, here = error.__traceback__, os.path.abspath(__file__)
    while tb is not None and (
        os.path.abspath(name := tb.tb_frame.f_code.co_filename) == here
        or os.path.basename(name) in ("runpy.py", "<frozen runpy>")
    ):
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb, file=sys.stderr)
