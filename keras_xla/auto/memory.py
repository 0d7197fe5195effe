"""The trial's decision, remembered across runs.

A restarted or repeated job should not pay the trial again: its winner is
kept in a small JSON file, keyed by everything that makes it valid. The
model (its class and every weight's path, shape and dtype), the input
signature of its first step, the hardware (CPU model, devices), the
backend's (TensorFlow or JAX) and Keras's versions, the candidates and
`steps_per_execution`.
Any change of these is a different key, and the trial runs again. A
decision made without trying an XLA candidate, because its compile could
not pay back in that run's steps, holds for runs up to that length only
(`up_to_steps`); a longer or unknown-length run tries again.

The file is `trial_decisions.json` beside the compile cache when one is
in force, else in keras_xla's machine cache (`KERAS_XLA_CACHE_DIR`, or
`~/.cache/keras_xla`). Reading or writing it never raises.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from typing import Any

from keras_xla import backends
from keras_xla.core import cache_home, hardware, json_files

FILE = "trial_decisions.json"


class DecisionMemory:
    """Remembered winners for one model and candidate set (the trial's
    candidate names, in order), in `directory`."""

    def __init__(
        self, directory: str, model: Any, candidates: list, steps_per_call: int
    ) -> None:
        import keras

        devices, backend = backends.machine()
        weights = getattr(model, "weights", [])
        self.path = os.path.join(directory, FILE)
        self._base = {
            "model": [type(model).__name__]
            + [[w.path, list(w.shape), str(w.dtype)] for w in weights],
            "hardware": [
                hardware.cpu_model() or platform.machine(),
                devices,
                backend,
                keras.__version__,
            ],
            "candidates": list(candidates),
            "steps_per_execution": int(steps_per_call),
        }

    @property
    def base(self) -> str:
        """The key without the input signature: this model here."""
        text = json.dumps(self._base, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def likely(self) -> str | None:
        """The winner last remembered for this model on any inputs: the
        candidate to start with, so a recalled run need not switch."""
        entries = [
            e
            for e in json_files.read_object(self.path).values()
            if isinstance(e, dict) and e.get("base") == self.base
        ]
        latest = max(entries, key=lambda e: e.get("saved_at", ""), default={})
        return latest.get("winner")

    def key(self, signature: Any) -> str:
        """The key for the first step's signature (a `Signature`)."""
        inputs = [[t.path, list(t.shape), t.dtype] for t in signature.tensors]
        text = json.dumps({**self._base, "inputs": inputs}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def recall(
        self, signature: Any, run_steps: int | None = None
    ) -> dict | None:
        """The remembered entry (`winner`, `reason`, `saved_at`, and
        `up_to_steps` where it holds for runs that long only), or None,
        also when this run of `run_steps` (None: unknown) is longer than
        its `up_to_steps`."""
        entry = json_files.read_object(self.path).get(self.key(signature))
        if not isinstance(entry, dict) or not entry.get("winner"):
            return None
        limit = entry.get("up_to_steps")
        if isinstance(limit, int) and (run_steps is None or run_steps > limit):
            return None
        return entry

    def remember(
        self,
        signature: Any,
        winner: str,
        reason: str,
        up_to_steps: int | None = None,
    ) -> None:
        """Keeps `winner` for this key; `up_to_steps` when it holds for
        runs up to that many steps only (module docstring)."""
        entry = {
            "base": self.base,
            "winner": winner,
            "reason": reason,
            "saved_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        if up_to_steps is not None:
            entry["up_to_steps"] = int(up_to_steps)
        key = self.key(signature)
        try:
            # Under the file's lock: a concurrent run's decisions stay.
            json_files.update(self.path, lambda data: data.update({key: entry}))
        except OSError as error:
            cache_home.cannot_keep("the decision", error)


def directory(cache_status: Any) -> str:
    """Beside the compile cache if one is in force, else the machine's
    keras_xla cache."""
    if cache_status is not None and cache_status.active:
        return cache_status.directory
    return cache_home.directory()
