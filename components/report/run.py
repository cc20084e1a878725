"""The run report: one self-contained HTML page of everything a run produced.

Built from the steps' own records, read as plain files and dicts (no TensorFlow, no import of
another step): the dataset's ``dataset.json`` (read by ``trainer.tfrecords.load_dataset_info``)
and ``rejected.jsonl``, training's ``training.json``, the evaluation's metrics, confusion matrix,
blessing and run-report part (``samples.json``), the benchmark's row, and the stages'
``current.json`` and ``history.jsonl``. Every chart is drawn by :mod:`components.charts`
(matplotlib, inline SVG) and every image is a ``data:`` URI: the page loads nothing, runs no
script, and opens the same from a laptop's disk or in the Kubeflow UI's sandboxed frame.

The page knows no task. What a task shows of its dataset, its training and its evaluation (a
classifier's images per class and worst classes, a detector's boxes per class and sizes, losses,
drawn test images) comes with the evaluation: the evaluate step's renderers for the task make
those parts (``samples.json``'s ``sections``, ``components/evaluate/samples.py``), and the page
places them in its sections. A headline figure is the headline of the task the run (or a stage's
model) was made for, which the records name (``task``).

Step status and times exist only where the page is built by the local runner (``make run``): a
step on a cluster cannot see the others' status, so there the section says so.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from components import charts, pages
from components.pages import Markup
from trainer import model_folder

if TYPE_CHECKING:
    from trainer.tfrecords import DatasetInfo

# Rejections listed one by one (the rest are counted by reason).
REJECTIONS_LISTED = 20
# History entries shown per stage (newest first).
HISTORY_SHOWN = 8
# Two charts side by side on a page 1,080 pixels wide.
HALF_IN = 5.2


class ReportError(ValueError):
    """The report cannot be built from what it was given; the message says what and why."""


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One step of a local run, as the console saw it.

    Attributes:
        name: the step's display name (``Convert to TFRecords``).
        task: the task's name in the run folder (``convert-to-tfrecords``).
        status: ``succeeded``, ``failed`` or ``not run`` (a false condition, a failed upstream).
        seconds: how long it ran; None when it did not run.
        headline: its figure in one line (``40,000 images, 0 rejected``); may be empty.
        log: its log file, relative to the report's folder; None when there is none.
    """

    name: str
    task: str
    status: str
    seconds: Optional[float] = None
    headline: str = ""
    log: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a local run stopped.

    Attributes:
        step: the failing step's display name.
        error: the error line (the last exception in its log, or kfp.local's message).
        log_tail: the last lines of its log.
        log: the whole log's path.
    """

    step: str
    error: str
    log_tail: str
    log: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ReportInputs:
    """What the page is built from; every part may be missing (a failed or partial run).

    Attributes:
        title: the page's title.
        run: the run's name (the kfp.local run folder or the Kubeflow job name).
        dataset_dir: the Dataset folder (``dataset.json``, ``rejected.jsonl``).
        model_dir: the Model folder (``training.json``).
        evaluation: the evaluation's scalar metrics (the Metrics artifact's metadata).
        confusion: the ClassificationMetrics artifact's metadata (``confusionMatrix``), or
            ``{"classes": [...], "matrix": [[...]]}``.
        blessing: the blessing artifact's JSON.
        samples: the evaluation's part of the report (``samples.json``: the task's image sample
            and its parts of the sections).
        benchmark: the benchmark's row (``BenchmarkRow.summary().to_dict()``).
        stages_root: the stage store (``current.json`` and ``history.jsonl`` per stage).
        steps: the local run's steps with status and times; None on a cluster.
        failure: why the run stopped, when it did.
        parameters: the run-form parameters that differ from the form's defaults, each a mapping
            of ``name``, ``value``, ``default`` and ``from`` (where the value came from: ``SET``,
            ``CONFIG run.yaml``, ``EPOCHS``, ...); None where they were not recorded (a cluster
            run: the Kubeflow UI shows its parameters).
    """

    title: str = "Run report"
    run: str = ""
    dataset_dir: Optional[str] = None
    model_dir: Optional[str] = None
    evaluation: Optional[Mapping[str, Any]] = None
    confusion: Optional[Mapping[str, Any]] = None
    blessing: Optional[Mapping[str, Any]] = None
    samples: Optional[Mapping[str, Any]] = None
    benchmark: Optional[Mapping[str, Any]] = None
    stages_root: Optional[str] = None
    steps: Optional[Sequence[StepRecord]] = None
    failure: Optional[Failure] = None
    parameters: Optional[Sequence[Mapping[str, Any]]] = None


# ------------------------------------------------------------------------------------ reading


def _read_text(path: str) -> Optional[str]:
    from trainer import storage

    try:
        return storage.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        return None


def read_json(path: Optional[str]) -> Optional[dict[str, Any]]:
    """A JSON file's content (local or gs://), or None when the path is None or the file is missing.

    Raises:
        ReportError: the file is there but is not a JSON object.
    """
    if not path:
        return None
    text = _read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReportError(f"{path} is not JSON ({err}); expected the step's record") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} holds a {type(data).__name__}, expected a JSON object")
    return data


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name if folder.startswith("gs://") else os.path.join(folder, name)


def confusion_matrix(confusion: Optional[Mapping[str, Any]]) -> Optional[tuple[list[str], list[list[int]]]]:
    """(class names, matrix) from a ClassificationMetrics' metadata or a plain dict, or None.

    Raises:
        ReportError: the matrix is not square over the classes.
    """
    if not confusion:
        return None
    if "confusionMatrix" in confusion:
        cm = confusion["confusionMatrix"]
        names = [str(a.get("displayName", "")) for a in cm.get("annotationSpecs", [])]
        matrix = [[int(v) for v in r.get("row", [])] for r in cm.get("rows", [])]
    else:
        names = [str(n) for n in confusion.get("classes", [])]
        matrix = [[int(v) for v in row] for row in confusion.get("matrix", [])]
    if len(matrix) != len(names) or any(len(row) != len(names) for row in matrix):
        raise ReportError(f"the confusion matrix is not {len(names)}x{len(names)} for {len(names)} classes")
    return names, matrix


# ------------------------------------------------------------------------------------ HTML

_CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--bg2:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);
margin:0 auto;max-width:1080px;padding:20px 24px 60px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:16px 0 6px}p{margin:6px 0}.muted{color:var(--muted)}
nav{margin:8px 0 0;font-size:13px}nav a{margin-right:12px;color:#0969da;text-decoration:none}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:right;vertical-align:top}
th{background:var(--bg2);font-weight:600}td.l,th.l{text-align:left}
.ok{color:var(--ok);font-weight:600}.bad{color:var(--bad);font-weight:600}.warn{color:var(--warn);font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{border:1px solid var(--line);border-radius:8px;padding:8px 12px;min-width:150px;background:#fff}
.card b{display:block;font-size:20px}.card span{color:var(--muted);font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}.charts svg{max-width:100%;height:auto}
svg.chart{max-width:100%;height:auto}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(96px,1fr));gap:8px;margin:8px 0}
.tile{border:2px solid var(--ok);border-radius:6px;padding:4px;text-align:center;font-size:11px;line-height:1.25}
.tile.wrong{border-color:var(--bad)}
.tile img{width:56px;height:auto;image-rendering:pixelated;display:block;margin:0 auto 3px}
pre{background:var(--bg2);border:1px solid var(--line);padding:8px;overflow:auto;font-size:12px;max-height:420px}
.banner{border-radius:8px;padding:10px 14px;margin:12px 0;font-weight:600}
.banner.ok{background:#dafbe1;color:var(--ok)}.banner.bad{background:#ffebe9;color:var(--bad)}
ul.reasons{margin:4px 0 8px 18px;padding:0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any, spec: str = ",.4f") -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else _e(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a"
    return format(value, spec)


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    """An HTML table; the first ``left`` columns are left-aligned text, cells are escaped."""
    return pages.table(head, rows, left=left)


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{_e(value)}</b><span>{_e(label)}</span></div>'


def _missing(what: str) -> str:
    return f'<p class="muted">{_e(what)}</p>'


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{_e(title)}</h2>\n{body}\n</section>'


_STATUS_CLASS = {"succeeded": "ok", "failed": "bad", "not run": "warn"}


def steps_section(steps: Optional[Sequence[StepRecord]], failure: Optional[Failure]) -> str:
    """The steps with status, seconds, headline and log; the failure with its log tail."""
    parts = []
    if failure is not None:
        parts.append(f'<div class="banner bad">The run failed at step “{_e(failure.step)}”: {_e(failure.error)}</div>')
    if steps is None:
        parts.append(
            _missing(
                "Step status and times are in the Kubeflow UI's run graph: a step on a cluster cannot see "
                "the others' status (the local report, from make run, lists them)."
            )
        )
    elif not steps:
        parts.append(_missing("No step ran."))
    else:
        rows = []
        for s in steps:
            cls = _STATUS_CLASS.get(s.status, "")
            log = f'<a href="{_e(s.log)}">log</a>' if s.log else ""
            secs = "" if s.seconds is None else f"{s.seconds:.1f}"
            rows.append(
                f'<tr><td class=l>{_e(s.name)}</td><td class="l {cls}">{_e(s.status)}</td><td>{secs}</td>'
                f"<td class=l>{_e(s.headline)}</td><td class=l>{log}</td></tr>"
            )
        parts.append(
            "<table><tr><th class=l>step</th><th class=l>status</th><th>seconds</th><th class=l>result</th>"
            f"<th class=l>log</th></tr>{''.join(rows)}</table>"
        )
    if failure is not None:
        where = f" (whole log: <code>{_e(failure.log)}</code>)" if failure.log else ""
        parts.append(f"<h3>Log tail of “{_e(failure.step)}”{where}</h3><pre>{_e(failure.log_tail)}</pre>")
    return _section("steps", "Steps", "\n".join(parts))


def _value(value: Any) -> str:
    """A parameter's value as a person types it (JSON for mappings and lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def parameters_section(parameters: Optional[Sequence[Mapping[str, Any]]]) -> str:
    """The run-form parameters that differ from the form's defaults: value, default, where from."""
    if parameters is None:
        body = _missing(
            "The run's parameters are in the Kubeflow UI's run details (the local report of make run "
            "lists those that differ from the run form's defaults)."
        )
    elif not parameters:
        body = "<p>Every parameter of the run form at its default.</p>"
    else:
        rows = [
            [p.get("name", "?"), _value(p.get("value")), _value(p.get("default")), p.get("from", "")]
            for p in parameters
        ]
        body = "<p>The parameters that differ from the run form's defaults.</p>" + str(
            _table(["parameter", "value", "default", "from"], rows, left=4)
        )
    return _section("parameters", "Parameters", body)


def _dataset_info(dataset_dir: Optional[str]) -> Optional[DatasetInfo]:
    """The dataset's manifest, or None when there is no dataset folder or no ``dataset.json`` in it.

    Raises:
        ReportError: ``dataset.json`` is there but is not a valid manifest.
    """
    from trainer import storage, tfrecords

    if not dataset_dir or not storage.exists(_join(dataset_dir, tfrecords.MANIFEST_NAME)):
        return None
    try:
        return tfrecords.load_dataset_info(dataset_dir)
    except tfrecords.DatasetError as err:
        raise ReportError(str(err)) from None


def dataset_section(dataset_dir: Optional[str], task_part: str = "") -> str:
    """Counts per split, the task's part (its counts per class, ...), and the rejections with their reasons.

    Args:
        dataset_dir: the Dataset folder.
        task_part: the task's part of the section (HTML its renderers made, ``samples.json``);
            empty when the evaluation did not publish one.
    """
    info = _dataset_info(dataset_dir)
    if info is None:
        return _section("dataset", "Dataset", _missing("No dataset: the conversion did not finish."))
    splits = info.splits
    classes = [str(c) for c in info.classes]
    names = list(splits)
    total = sum(s.count for s in splits.values())
    image = info.image
    size = "of mixed sizes" if image is None else f"{image.height}×{image.width}×{image.channels}"
    cards = "".join(
        [
            _card(f"{total:,}", "images"),
            *(_card(f"{splits[n].count:,}", f"{n}") for n in names),
            _card(f"{len(classes)}", "classes"),
            _card(f"{info.rejected:,}", "rejected"),
        ]
    )
    parts = [
        f"<p>Source <code>{_e(info.source.uri)}</code> ({_e(info.source.format)}); images {_e(size)}.</p>",
        f'<div class="cards">{cards}</div>',
        task_part or _missing(f"Classes: {', '.join(classes)}. The task's counts come with the evaluation."),
    ]
    parts.append("<h3>Rejected images</h3>")
    reasons = info.rejected_reasons
    if not info.rejected:
        parts.append("<p>None: every image of the source was usable.</p>")
    else:
        parts.append(_table(["reason", "images"], sorted(reasons.items(), key=lambda kv: -kv[1])))
        listed = _read_text(_join(dataset_dir, "rejected.jsonl")) or ""
        lines = [json.loads(line) for line in listed.splitlines()[:REJECTIONS_LISTED] if line.strip()]
        if lines:
            parts.append(
                _table(
                    ["image", "reason"],
                    [[r.get("path") or r.get("uri") or r.get("id", "?"), r.get("reason", "?")] for r in lines],
                    left=2,
                )
            )
    return _section("dataset", "Dataset", "\n".join(parts))


def _metric_keys(history: Sequence[Mapping[str, Any]]) -> list[str]:
    skip = {"epoch", "step", "loss", "val_loss", "learning_rate"}
    keys = []
    for entry in history:
        for k in entry:
            if k not in skip and not k.startswith("val_") and k not in keys:
                keys.append(k)
    return keys


def _fit_part(fit: Optional[dict]) -> list[str]:
    """What the task fitted to the data (``training.json``'s ``fit``), one item a line; nothing without a fit."""
    if not fit or not fit.get("lines"):
        return []
    items = "".join(f"<li>{_e(line)}</li>" for line in fit["lines"])
    return [f"<p>Fitted to the training data (the options left on <code>auto</code>):</p><ul>{items}</ul>"]


def _training_charts(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """The loss and each logged metric per epoch (train and validation), and the per-epoch table."""
    epochs = [float(h.get("epoch", i + 1)) for i, h in enumerate(history)]

    def curve(key: str) -> Optional[tuple[list[float], list[float]]]:
        points = [(x, h[key]) for x, h in zip(epochs, history, strict=True) if isinstance(h.get(key), (int, float))]
        return ([p[0] for p in points], [float(p[1]) for p in points]) if points else None

    figures = []
    for key in ("loss", *_metric_keys(history)):
        series = {label: c for label, c in (("train", curve(key)), ("validation", curve("val_" + key))) if c}
        if series:
            limits = (0.0, 1.0) if "accuracy" in key or key in {"auc", "precision", "recall", "ap"} else None
            figures.append(
                charts.line_chart(
                    f"{key} per epoch", series, "epoch", key, limits=limits, width_in=HALF_IN, integer_x=True
                )
            )
    keys = sorted({k for h in history for k in h if k not in ("epoch", "step")})
    rows = [[h.get("epoch", ""), h.get("step", ""), *(_num(h.get(k)) for k in keys)] for h in history]
    return [f'<div class="charts">{"".join(figures)}</div>', _table(["epoch", "step", *keys], rows, left=0)]


def training_section(model_dir: Optional[str], task_part: str = "") -> str:
    """The run's figures, the task's part, what was fitted to the data, the loss and metrics per epoch.

    Args:
        model_dir: the Model folder (``training.json``).
        task_part: the task's part of the section (HTML its renderers made, ``samples.json``: a
            classifier's accuracies, a detector's losses and fit); empty when the evaluation did
            not publish one.
    """
    summary = read_json(model_folder.summary_path(model_dir)) if model_dir else None
    if summary is None:
        return _section("training", "Training", _missing("No training record: training did not finish."))
    history = summary.get("history", []) or []
    cards = "".join(
        [
            _card(_num(summary.get("images_per_sec"), ",.0f"), "training images/s"),
            _card(f"{summary.get('epochs', '?')} × {summary.get('steps_per_epoch', '?')}", "epochs × steps"),
            _card(_num(summary.get("train_seconds"), ",.1f"), "seconds training"),
        ]
    )
    parts = [
        f"<p>Model <code>{_e(summary.get('model', '?'))}</code> ({_e(summary.get('task', '?'))}"
        f"{_e('; chosen: ' + summary['model_reason'] if summary.get('model_reason') else '')}) on "
        f"{_e(summary.get('accelerator', '?'))} × {_e(summary.get('replicas', '?'))}, global batch "
        f"{_e(summary.get('global_batch_size', '?'))}, {_e(summary.get('precision', '?'))}"
        f"{_e(' (' + summary['precision_reason'] + ')' if summary.get('precision_reason') else '')}, learning rate "
        f"{_e(summary.get('learning_rate', '?'))}.</p>",
        f'<div class="cards">{cards}</div>',
        task_part,
        *_fit_part(summary.get("fit")),
    ]
    if not history:
        parts.append(_missing("No per-epoch history in training.json."))
    else:
        parts += _training_charts(history)
    return _section("training", "Training", "\n".join(p for p in parts if p))


def _tile_text(item: Mapping[str, Any]) -> tuple[list[str], bool]:
    """A tile's caption lines and whether the model got it right (a sample of an earlier version: from its labels)."""
    if "caption" in item:
        return [str(line) for line in item.get("caption") or []], bool(item.get("ok"))
    caption = [f"true: {item.get('true')}", f"pred: {item.get('predicted')} ({_num(item.get('score'), '.0%')})"]
    return caption, item.get("true") == item.get("predicted")


def _samples_grid(samples: Optional[Mapping[str, Any]]) -> str:
    """The evaluation's image sample as tiles: each image with its caption, framed red where the model erred."""
    items = [i for i in (samples or {}).get("images", []) if str(i.get("mime", "image/png")).startswith("image/")]
    if not items:
        return _missing("No image sample was published by the evaluation.")
    px = int(samples.get("tile_px") or 56)
    tiles, wrong = [], 0
    for item in items:
        caption, ok = _tile_text(item)
        wrong += not ok
        tiles.append(
            f'<div class="tile{"" if ok else " wrong"}"><img alt="{_e(caption[0] if caption else "test image")}" '
            f'style="width:{px}px" src="data:{_e(item.get("mime", "image/png"))};base64,{_e(item.get("data", ""))}">'
            f"{'<br>'.join(_e(line) for line in caption)}</div>"
        )
    summary = samples.get("summary") or (
        f"{len(items)} of the first {samples.get('scanned', len(items))} {samples.get('split', '')} images, "
        f"mistakes first ({wrong} wrong, red)."
    )
    columns = f"grid-template-columns:repeat(auto-fill,minmax({px + 16}px,1fr))"
    return f'<p>{_e(summary)}</p><div class="grid" id="samples" style="{columns}">{"".join(tiles)}</div>'


def task_sections(samples: Optional[Mapping[str, Any]]) -> dict[str, str]:
    """The task's parts of the sections (HTML its renderers made in the evaluate step), by section."""
    found = (samples or {}).get("sections") or {}
    return {str(k): str(v) for k, v in found.items() if isinstance(v, str)}


def _metric_label(task_name: Optional[str], name: str) -> str:
    """A metric's label as its task says it (``AP@0.5``), else its name in words."""
    from trainer.tasks import TaskError, task_types

    task_type = task_types().get(task_name or "")
    try:
        label = task_type.metric(name).label if task_type is not None else ""
    except TaskError:  # not one of the task's metrics (num_examples)
        label = ""
    return label or name.replace("_", " ")


def evaluation_section(
    evaluation: Optional[Mapping[str, Any]],
    confusion: Optional[Mapping[str, Any]],
    samples: Optional[Mapping[str, Any]],
    task: Optional[str] = None,
) -> str:
    """The metrics, the confusion matrix as a heatmap (where the task has one), the task's part, the image grid.

    Args:
        evaluation: the evaluation's scalar metrics.
        confusion: its confusion matrix (the ClassificationMetrics' metadata), where the task has one.
        samples: its part of the report (``samples.json``).
        task: the run's task, which labels its metrics; None: their names.
    """
    if not evaluation:
        return _section("evaluation", "Evaluation", _missing("No evaluation: the step did not finish."))
    shown = [(k, v) for k, v in evaluation.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    cards = "".join(_card(_num(v, ",.0f" if k.startswith("num_") else ".4f"), _metric_label(task, k)) for k, v in shown)
    parts = [f'<div class="cards">{cards}</div>']
    cm = confusion_matrix(confusion)
    if cm is not None:
        names, matrix = cm
        heatmap = charts.heatmap("Confusion matrix", matrix, names, "predicted", "true", width_in=6.0)
        parts.append(f'<div class="charts">{heatmap}</div>')
    parts.append(task_sections(samples).get("evaluation", ""))
    parts.append("<h3>Test images</h3>")
    parts.append(_samples_grid(samples))
    return _section("evaluation", "Evaluation", "\n".join(p for p in parts if p))


def gate_section(blessing: Optional[Mapping[str, Any]]) -> str:
    """The gate's decision and every reason, and its checks against thresholds and the baseline."""
    if not blessing:
        return _section("gate", "Gate", _missing("No gate decision: the evaluation did not finish."))
    blessed = bool(blessing.get("blessed"))
    decision = "BLESSED" if blessed else "NOT BLESSED"
    reasons = "".join(f"<li>{_e(r)}</li>" for r in blessing.get("reasons", []))
    parts = [
        f'<div class="banner {"ok" if blessed else "bad"}">{decision}</div>',
        f'<ul class="reasons">{reasons}</ul>',
    ]
    checks = blessing.get("checks", []) or []
    if checks:
        parts.append(
            _table(
                ["check", "metric", "value", "threshold", "baseline", "passed"],
                [
                    [
                        c.get("kind", ""),
                        c.get("metric", ""),
                        _num(c.get("value")),
                        _num(c.get("threshold")),
                        _num(c.get("baseline")),
                        "yes" if c.get("passed") else "no",
                    ]
                    for c in checks
                ],
                left=2,
            )
        )
    base = blessing.get("baseline")
    parts.append(
        "<p>Baseline: prod's metrics " + (_e(json.dumps(base)) if base else "none (prod served nothing)") + ".</p>"
    )
    return _section("gate", "Gate", "\n".join(parts))


def benchmark_section(row: Optional[Mapping[str, Any]]) -> str:
    """The benchmark's table (in process and over REST) and its charts."""
    if not row:
        return _section("benchmark", "Benchmark", _missing("No benchmark: the step did not finish."))
    paths = [("in process", "")]
    if row.get("http_images_per_sec") is not None:
        paths.append((f"REST ({row.get('http_server') or 'server not recorded'})", "http_"))
    rows = []
    for label, p in paths:
        rows.append(
            [
                label,
                _num(row.get(p + "num_images"), ",.0f"),
                _num(row.get(p + "batch_size"), ",.0f"),
                _num(row.get(p + "time_s"), ",.3f"),
                _num(row.get(p + "images_per_sec"), ",.0f"),
                _num(row.get(p + "latency_p50_ms"), ",.2f"),
                _num(row.get(p + "latency_p95_ms"), ",.2f"),
                _num(row.get(p + "latency_p99_ms"), ",.2f"),
            ]
        )
    parts = [
        f"<p>On {_e(row.get('label', row.get('accelerator', '?')))} ({_e(row.get('cores', '?'))} cores, "
        f"${_num(row.get('price_per_hour'), ',.2f')}/hour, {_e(row.get('price_source', ''))}): "
        f"{_num(row.get('images_per_dollar'), ',.0f')} images per dollar.</p>",
        _table(["path", "images", "batch", "time (s)", "images/s", "p50 ms", "p95 ms", "p99 ms"], rows),
    ]
    labels = [label for label, _ in paths]
    figs = [
        charts.bar_chart(
            "Throughput", labels, [row.get(p + "images_per_sec") for _, p in paths], "images/s", width_in=HALF_IN
        ),
        charts.grouped_bars(
            "Batch latency",
            ["p50", "p95", "p99"],
            {label: [row.get(f"{p}latency_{q}_ms") for q in ("p50", "p95", "p99")] for label, p in paths},
            "ms",
            width_in=HALF_IN,
        ),
    ]
    parts.append(f'<div class="charts">{"".join(figs)}</div>')
    return _section("benchmark", "Benchmark", "\n".join(parts))


def task_headline(task_name: Optional[str], metrics: Optional[Mapping[str, Any]]) -> tuple[str, Any]:
    """(label, value) of a task's headline metric in a record's metrics; ("", None) when the task is unknown."""
    from trainer.tasks import TaskError, task_types

    task_type = task_types().get(task_name or "")
    if task_type is None:
        return "", None
    try:
        return task_type.headline(metrics)
    except TaskError:  # a task whose headline is not among its metrics: nothing to show
        return "", None


def _model_task(model_uri: str) -> Optional[str]:
    """The task a model folder was trained for (its ``training.json``), or None where the folder is gone.

    A ``training.json`` without ``task`` is a classifier's, as ``trainer.tasks.task_of_model`` reads it.
    """
    from trainer.tasks import DEFAULT_TASK

    try:
        summary = read_json(model_folder.summary_path(model_uri)) if model_uri else None
    except (OSError, ReportError):
        return None
    return None if summary is None else str(summary.get("task") or DEFAULT_TASK)


def _entry_task(entry: Any, known: dict[str, Optional[str]]) -> Optional[str]:
    """The task of a stage record's model: the record's own ``task``, else its model folder's.

    Args:
        entry: a ``components.serving.stages.StageEntry``.
        known: model URI -> task, the folders read so far (each is read once per page).
    """
    named = getattr(entry, "task", None) or (getattr(entry, "extra", None) or {}).get("task")
    if named:
        return str(named)
    if entry.model_uri not in known:
        known[entry.model_uri] = _model_task(entry.model_uri)
    return known[entry.model_uri]


def run_task(inputs: ReportInputs) -> Optional[str]:
    """The task the run was made for, as its records name it: the evaluation's, the training's, the dataset's."""
    for record in (inputs.samples, inputs.blessing):
        if record and record.get("task"):
            return str(record["task"])
    if inputs.model_dir:
        task = _model_task(inputs.model_dir)
        if task is not None:
            return task
    info = _dataset_info(inputs.dataset_dir)
    return None if info is None else info.task


def stages_section(stages_root: Optional[str]) -> str:
    """What each stage serves (every model, by name), and each model's history, newest first."""
    if not stages_root:
        return _section("stages", "Stages", _missing("No stage store was given."))
    from components.serving import stages

    parts: list[str] = []
    known: dict[str, Optional[str]] = {}
    for stage in stages.STAGES:
        served = stages.served_models(stages_root, stage)
        if not served:
            parts.append(f"<h3>{_e(stage)}: serves nothing</h3>")
            continue
        for name in sorted(served):
            current = served[name]
            label, value = task_headline(_entry_task(current, known), current.metrics)
            parts.append(
                f"<h3>{_e(stage)}: serves {_e(name)} version {_e(current.version)} from run "
                f"{_e(current.run)}" + (f", {label} {_num(value)}" if value is not None else "") + "</h3>"
            )
            rows = []
            for entry in reversed(stages.read_history(stages_root, stage, name)[-HISTORY_SHOWN:]):
                passed = sum(1 for c in entry.checks if c.passed)
                rows.append(
                    [
                        entry.time,
                        entry.action,
                        "none" if entry.version is None else entry.version,
                        entry.run,
                        _num(task_headline(_entry_task(entry, known), entry.metrics)[1]),
                        f"{passed}/{len(entry.checks)}",
                        entry.reason or "",
                    ]
                )
            if rows:
                parts.append(_table(["time", "action", "version", "run", "score", "checks", "reason"], rows, left=4))
            else:
                parts.append(_missing("No history yet."))
    return _section("stages", "Stages", "\n".join(parts))


def glance(inputs: ReportInputs) -> str:
    """The run's figures in one row of cards, above the sections."""
    training = read_json(model_folder.summary_path(inputs.model_dir)) if inputs.model_dir else None
    evaluation = inputs.evaluation or {}
    cards = [_card("failed" if inputs.failure else "succeeded", "run")]
    label, value = task_headline(run_task(inputs), evaluation)
    if value is not None:
        cards.append(_card(_num(value), label))
    if inputs.blessing:
        cards.append(_card("blessed" if inputs.blessing.get("blessed") else "not blessed", "gate"))
    if training and training.get("images_per_sec") is not None:
        cards.append(_card(_num(training["images_per_sec"], ",.0f"), "training images/s"))
    if inputs.benchmark and inputs.benchmark.get("images_per_sec") is not None:
        cards.append(_card(_num(inputs.benchmark["images_per_sec"], ",.0f"), "inference images/s"))
    if inputs.steps:
        took = sum(s.seconds or 0.0 for s in inputs.steps)
        cards.append(_card(f"{took:,.0f} s", f"{sum(1 for s in inputs.steps if s.status != 'not run')} steps"))
    return f'<div class="cards" id="glance">{"".join(cards)}</div>'


# The sections in the page's order, as the header's links name them.
_NAV = (
    ("steps", "Steps"),
    ("parameters", "Parameters"),
    ("dataset", "Dataset"),
    ("training", "Training"),
    ("evaluation", "Evaluation"),
    ("gate", "Gate"),
    ("benchmark", "Benchmark"),
    ("stages", "Stages"),
)
_HEADER = (
    "<header><h1>{{ title }}</h1><p class=muted>Run <code>{{ run }}</code>: {{ status }}.</p>"
    '<nav>{% for anchor, text in links %}<a href="#{{ anchor }}">{{ text }}</a>{% endfor %}</nav></header>'
)


def render(inputs: ReportInputs) -> str:
    """The whole page.

    Args:
        inputs: the run's records; missing parts give a section that says what is missing.

    Returns:
        The HTML text (UTF-8, self-contained).
    """
    samples = inputs.samples
    task_parts = task_sections(samples)
    sections = [
        steps_section(inputs.steps, inputs.failure),
        parameters_section(inputs.parameters),
        dataset_section(inputs.dataset_dir, task_parts.get("dataset", "")),
        training_section(inputs.model_dir, task_parts.get("training", "")),
        evaluation_section(inputs.evaluation, inputs.confusion, samples, run_task(inputs)),
        gate_section(inputs.blessing),
        benchmark_section(inputs.benchmark),
        stages_section(inputs.stages_root),
    ]
    status = "failed" if inputs.failure is not None else "finished"
    header = pages.fragment(_HEADER, title=inputs.title, run=inputs.run or "?", status=status, links=_NAV)
    blocks = [header, Markup(glance(inputs)), *(Markup(s) for s in sections)]
    return pages.page(inputs.title, blocks, _CSS, heading=False, lang="en", viewport=True)


def write_report(inputs: ReportInputs, path: str) -> int:
    """Renders the page and writes it to ``path`` (local or gs://); returns its size in bytes."""
    from trainer import storage

    data = render(inputs).encode("utf-8")
    if path.startswith("gs://"):
        storage.write_bytes(path, data)
    else:  # a page for people to open: readable by all, as any file the user writes
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return len(data)
