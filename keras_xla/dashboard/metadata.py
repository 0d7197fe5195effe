"""What the tuner writes for the "XLA" tab, and under which name.

The report is written as a JSON string tensor at each epoch end, tag
`REPORT_TAG`, with `PLUGIN_NAME` in its summary metadata, next to the
`xla/` scalars in the same run (`<log_dir>/train`). TensorBoard's data
provider then lists it under this plugin, wherever it reads the log dir.
"""

from __future__ import annotations

PLUGIN_NAME = "xla"
TAB_NAME = "XLA"
REPORT_TAG = "xla/report"
# The version of what the tensor holds: the report's JSON.
CONTENT = b"keras_xla.report/1"
# The per-train-call step time, written by the scalar summaries.
STEP_TIME_TAG = "xla/step_time_ms"


def summary_metadata() -> bytes:
    """The report tensor's serialized `SummaryMetadata`: this plugin's
    name, a tensor of one string."""
    from tensorboard.compat.proto import summary_pb2

    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=CONTENT
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    ).SerializeToString()
