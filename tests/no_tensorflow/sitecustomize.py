"""On PYTHONPATH, makes this process an install without TensorFlow: its
import fails as a missing package's does (TensorBoard then uses its own
stub, as it does in a `[jax]` install)."""

import sys


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTensorFlow())
