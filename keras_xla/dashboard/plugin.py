"""The "XLA" tab: a dynamic TensorBoard plugin, registered under the
`tensorboard_plugins` entry point of this package.

A small WSGI app under `/data/plugin/xla/`. Each route reads TensorBoard's
data provider (the report tensors written with this plugin's name, and
the `xla/step_time_ms` scalars beside them) and answers JSON:

- `runs`: the run list (`views.run_entry`), the results of `keras-xla run
  --compare` (`comparisons`) and, when no run holds the tuner's report,
  how to add it (`empty`);
- `report?run=R`: the run's view (`views.run_view`);
- `compare?a=R1&b=R2`: two runs side by side (`views.comparison_view`).

`index.js` (the page's ES module), `static/<file>` (its CSS) are served
by the plugin itself from its `static/` folder, only files it ships.
"""

from __future__ import annotations

import json
import os

from tensorboard import errors, plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from keras_xla.dashboard import metadata, views

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}
# The most step-time points read per run (TensorBoard keeps 1000 scalars
# per tag unless told more with --samples_per_plugin).
MAX_STEP_POINTS = 100_000
MAX_REPORTS = 1000


class XLAPlugin(base_plugin.TBPlugin):
    """TensorBoard's "XLA" tab over the reports `XLATuner` writes."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._data_provider = context.data_provider

    def get_plugin_apps(self) -> dict:
        return {
            "/index.js": self._serve_static,
            "/static/*": self._serve_static,
            "/runs": self._serve_runs,
            "/report": self._serve_report,
            "/compare": self._serve_compare,
        }

    def is_active(self) -> bool:
        # Active where a run holds the tuner's report (TensorBoard checks
        # `data_plugin_names` against the data first); elsewhere the tab
        # is listed as inactive and, opened, shows how to add the tuner.
        return False

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(
            es_module_path="/index.js", tab_name=metadata.TAB_NAME
        )

    @wrappers.Request.application
    def _serve_static(self, request):
        """`index.js`, or `static/<name>`."""
        prefix = f"/data/plugin/{self.plugin_name}/"
        name = request.path.partition(prefix)[2].removeprefix("static/")
        path = static_path(name)
        if path is None:
            return http_util.Respond(
                request, "Not found", "text/plain", code=404
            )
        with open(path, "rb") as f:
            body = f.read()
        content_type = STATIC_TYPES[os.path.splitext(name)[1]]
        return http_util.Respond(request, body, content_type)

    def _latest(self, request, tag: str, runs=None) -> dict[str, str]:
        """`{run: text}`: the latest (by wall time) string tensor `tag`
        of each run, or of `runs`."""
        found = self._data_provider.read_tensors(
            plugin_util.context(request.environ),
            experiment_id=plugin_util.experiment_id(request.environ),
            plugin_name=metadata.PLUGIN_NAME,
            downsample=MAX_REPORTS,
            run_tag_filter=provider.RunTagFilter(runs=runs, tags=[tag]),
        )
        return {
            run: _text(max(data, key=lambda d: (d.wall_time, d.step)).numpy)
            for run, tags in found.items()
            if (data := tags.get(tag))
        }

    def _reports(self, request, runs=None) -> dict:
        """`{run: XLAReport}`: the latest report of each run, or of
        `runs`."""
        texts = self._latest(request, metadata.REPORT_TAG, runs)
        reports = {run: views.parse_report(text) for run, text in texts.items()}
        return {run: r for run, r in reports.items() if r is not None}

    def _step_times(self, request, run: str) -> list[tuple[int, float]]:
        found = self._data_provider.read_scalars(
            plugin_util.context(request.environ),
            experiment_id=plugin_util.experiment_id(request.environ),
            plugin_name="scalars",
            downsample=MAX_STEP_POINTS,
            run_tag_filter=provider.RunTagFilter(
                runs=[run], tags=[metadata.STEP_TIME_TAG]
            ),
        )
        points = found.get(run, {}).get(metadata.STEP_TIME_TAG) or []
        return [(p.step, p.value) for p in points]

    @wrappers.Request.application
    def _serve_runs(self, request):
        reports = self._reports(request)
        comparisons = [
            views.comparison_entry(run, text)
            for run, text in sorted(
                self._latest(request, metadata.COMPARE_TAG).items()
            )
        ]
        body = {
            "runs": [
                views.run_entry(run, reports[run]) for run in sorted(reports)
            ],
            "comparisons": [c for c in comparisons if c is not None],
            "empty": None if reports else views.ADD_THE_TUNER,
        }
        return _json(request, body)

    @wrappers.Request.application
    def _serve_report(self, request):
        run = request.args.get("run")
        if not run:
            raise errors.InvalidArgumentError("Missing `run`.")
        report = self._reports(request, [run]).get(run)
        if report is None:
            raise errors.NotFoundError(f"No XLATuner report in run {run!r}.")
        view = views.run_view(run, report, self._step_times(request, run))
        job = self._job(request, run)
        if job is not None:
            view["job"] = views.job_view(job, run)
        return _json(request, view)

    def _job(self, request, run: str) -> dict | None:
        """The job report (the chief's `JOB_TAG`) of the job whose worker
        ran `run`, or None (not a worker's run, or no job report yet)."""
        chief = views.chief_run(run)
        if chief is None:
            return None
        text = self._latest(request, metadata.JOB_TAG, [chief]).get(chief)
        try:
            job = json.loads(text) if text is not None else None
        except ValueError:
            return None
        return job if isinstance(job, dict) else None

    @wrappers.Request.application
    def _serve_compare(self, request):
        names = [request.args.get("a"), request.args.get("b")]
        if not all(names):
            raise errors.InvalidArgumentError("Missing `a` or `b`.")
        reports = self._reports(request, names)
        missing = [n for n in names if n not in reports]
        if missing:
            raise errors.NotFoundError(
                f"No XLATuner report in run {missing[0]!r}."
            )
        runs = [(n, reports[n]) for n in names]
        return _json(request, views.comparison_view(runs))


def static_path(name: str) -> str | None:
    """The path of the shipped static file `name`, or None for any other
    name: one plain file name of a served type, inside `STATIC_DIR`, not
    a link out of it."""
    if not name or name != os.path.basename(name) or name.startswith("."):
        return None
    if os.path.splitext(name)[1] not in STATIC_TYPES:
        return None
    root = os.path.realpath(STATIC_DIR)
    path = os.path.realpath(os.path.join(root, name))
    if os.path.dirname(path) != root or not os.path.isfile(path):
        return None
    return path


def _text(value) -> str:
    """The report tensor's string (a 0-d bytes array)."""
    item = value.item() if hasattr(value, "item") else value
    return item.decode("utf-8") if isinstance(item, bytes) else str(item)


def _json(request, body):
    return http_util.Respond(
        request, json.dumps(body, allow_nan=False), "application/json"
    )
