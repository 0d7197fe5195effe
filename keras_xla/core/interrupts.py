"""Calls that end a fit when they raise.

Keras calls no hook when a step, a callback or its own work between the
hooks raises: the fit is just over. `on_error` wraps such a call so that
the tuner hears of it (and ends the fit as interrupted) before the error
goes on. Pure Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# How Keras's loop learns that the data ended: not an interruption.
END_OF_DATA = ("StopIteration", "OutOfRangeError")


def on_error(fn: Callable, handler: Callable[[], Any]) -> Callable:
    """`fn` that calls `handler()` when it raises, a KeyboardInterrupt
    included, then lets the error go on; the end of the data (which
    Keras's loop catches) is not an error here, and a failing handler is
    ignored (the user's error is the one that counts)."""

    def guarded(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException as error:
            if type(error).__name__ not in END_OF_DATA:
                try:
                    handler()
                except Exception:  # noqa: BLE001 - never mask the error
                    pass
            raise

    return guarded
