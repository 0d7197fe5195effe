"""What the tuner writes for the "XLA" tab, and under which name.

The report is written as a JSON string tensor at each epoch end, tag
`REPORT_TAG`, with `PLUGIN_NAME` in its summary metadata, next to the
`xla/` scalars in the same run (`<log_dir>/train`). TensorBoard's data
provider then lists it under this plugin, wherever it reads the log dir.
"""

from __future__ import annotations

# The names are the writer's (`core.summaries`); the tab reads them.
from keras_xla.core.summaries import (  # noqa: F401
    COMPARE_TAG,
    JOB_TAG,
    PLUGIN_NAME,
    REPORT_TAG,
    STEP_TIME_TAG,
    summary_metadata,
)

TAB_NAME = "XLA"
