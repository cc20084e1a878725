"""The run report's sections: Jinja2 templates rendered from the run's records.

Each section is a template (autoescaped, :func:`components.pages.fragment`) and a function that
gives it its values from :class:`~components.report.records.RunRecords`; nothing here reads a
file. What the templates share (a card, a muted note) are macros put before each one, and every
section's body sits in one frame (its anchor and heading). HTML made elsewhere is placed as it
is: the charts (:mod:`components.charts`, inline SVG) and the task's parts of the sections, which
the evaluate step's renderers made with their values escaped (``samples.json``'s ``sections``).
Everything else is escaped by the templates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from components import charts, data_checks, pages
from components.pages import Markup
from components.report.records import RunRecords, ServedModel
from components.serving.drift_history import DriftHistory, history_blocks, latest_lines
from trainer.budget import layout

__all__ = ["SECTIONS", "blocks", "glance", "header", "section", "task_headline"]

# Two charts side by side on a page 1,080 pixels wide.
HALF_IN = 5.2

_MACROS = (
    '{% macro card(value, label) %}<div class="card"><b>{{ value }}</b><span>{{ label }}</span></div>{% endmacro %}'
    '{% macro missing(text) %}<p class="muted">{{ text }}</p>{% endmacro %}'
)
# The frame of every section; a section's body starts each of its parts on a line of its own.
_SECTION = '<section id="{{ anchor }}"><h2>{{ title }}</h2>{{ body }}\n</section>'


def _num(value: Any, spec: str = ",.4f") -> str:
    """A figure as shown: formatted, ``n/a`` for None or a number that is not finite, other values as text."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a"
    return format(value, spec)


def _render(source: str, **values: Any) -> Markup:
    """A section's template with the shared macros, the page's table and number format at hand."""
    return pages.fragment(_MACROS + source, table=pages.table, num=_num, **values)


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


def _metric_label(task_name: Optional[str], name: str) -> str:
    """A metric's label as its task says it (``AP@0.5``), else its name in words."""
    from trainer.tasks import TaskError, task_types

    task_type = task_types().get(task_name or "")
    try:
        label = task_type.metric(name).label if task_type is not None else ""
    except TaskError:  # not one of the task's metrics (num_examples)
        label = ""
    return label or name.replace("_", " ")


# ------------------------------------------------------------------------------------ steps

_STEPS = """{%- if failure %}
<div class="banner bad">The run failed at step “{{ failure.step }}”: {{ failure.error }}
{%- for line in failure.then %}<br>then: {{ line }}{% endfor %}</div>
{%- endif %}
{%- if steps is none %}
{{ missing("Step status and times are in the Kubeflow UI's run graph: a step on a cluster cannot see "
           "the others' status (the local report, from make run, lists them).") }}
{%- elif not steps %}
{{ missing("No step ran.") }}
{%- else %}
<table><tr><th class=l>step</th><th class=l>status</th><th>seconds</th><th class=l>result</th><th class=l>log</th></tr>
{%- for s in steps %}
<tr><td class=l>{{ s.name }}</td><td class="l {{ status_class.get(s.status, '') }}">{{ s.status }}</td>
<td>{{ '' if s.seconds is none else '%.1f' % s.seconds }}</td><td class=l>{{ s.headline }}</td>
<td class=l>{% if s.log %}<a href="{{ s.log }}">log</a>{% endif %}</td></tr>
{%- endfor %}</table>
{%- endif %}
{%- if failure %}
<h3>Log tail of “{{ failure.step }}”{% if failure.log %} (whole log: <code>{{ failure.log }}</code>){% endif %}</h3>
{#- the log's own line breaks are the content: nothing else inside <pre> #}
<pre>{{ failure.log_tail }}</pre>
{%- endif %}"""

_STATUS_CLASS = {"succeeded": "ok", "failed": "bad", "not run": "warn"}


def steps(run: RunRecords) -> Markup:
    """The steps with status, seconds, headline and log; the failure with its log tail."""
    return _render(_STEPS, steps=run.steps, failure=run.failure, status_class=_STATUS_CLASS)


# ------------------------------------------------------------------------------------ parameters

_PARAMETERS = """{%- if parameters is none %}
{{ missing("The run's parameters are in the Kubeflow UI's run details (the local report of make run "
           "lists those that differ from the run form's defaults).") }}
{%- elif not parameters %}
<p>Every parameter of the run form at its default.</p>
{%- else %}
<p>The parameters that differ from the run form's defaults.</p>
{{- table(["parameter", "value", "default", "from"], rows, left=4) }}
{%- endif %}"""


def _value(value: Any) -> str:
    """A parameter's value as a person types it (JSON for mappings and lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def parameters(run: RunRecords) -> Markup:
    """The run-form parameters that differ from the form's defaults: value, default, where from."""
    rows = [
        [p.get("name", "?"), _value(p.get("value")), _value(p.get("default")), p.get("from", "")]
        for p in run.parameters or ()
    ]
    return _render(_PARAMETERS, parameters=run.parameters, rows=rows)


# ------------------------------------------------------------------------------------ dataset

_DATASET = """{%- if info is none %}
{{ missing("No dataset: the conversion did not finish.") }}
{%- else %}
<p>Source <code>{{ info.source.uri }}</code> ({{ info.source.format }}); images {{ size }}.</p>
<div class="cards">{{ card(num(total, ","), "images") }}
{%- for name, split in info.splits.items() %}{{ card(num(split.count, ","), name) }}{% endfor %}
{{- card(classes | length, "classes") }}{{ card(num(info.rejected, ","), "rejected") }}</div>
{{ task_part or missing("Classes: " ~ classes | join(", ") ~ ". The task's counts come with the evaluation.") }}
<h3>Data checks</h3>
<p>{{ checks_summary }}</p>
{%- if checks %}
<ul>{% for line in checks %}<li>{{ line }}</li>{% endfor %}</ul>
{%- endif %}
<h3>Rejected images</h3>
{%- if not info.rejected %}
<p>None: every image of the source was usable.</p>
{%- else %}
{{ table(["reason", "images"], reasons, left=1) }}
{%- if rejections %}
{{ table(["image", "reason"], rejections, left=2) }}
{%- endif %}
{%- endif %}
{%- endif %}"""


def dataset(run: RunRecords) -> Markup:
    """Counts per split, the task's part (its counts per class, ...), and the rejections with their reasons.

    The task's part is the HTML its renderers made (``samples.json``); without one, the classes
    are listed and the section says that their counts come with the evaluation.
    """
    if run.dataset is None:
        return _render(_DATASET, info=None)
    info = run.dataset.info
    image = info.image
    return _render(
        _DATASET,
        info=info,
        size="of mixed sizes" if image is None else f"{image.height}×{image.width}×{image.channels}",
        total=sum(s.count for s in info.splits.values()),
        classes=[str(c) for c in info.classes],
        task_part=Markup(run.task_parts.get("dataset", "")),
        checks_summary=data_checks.summary_line(run.validation),
        checks=data_checks.finding_lines(run.validation),
        reasons=sorted(info.rejected_reasons.items(), key=lambda kv: -kv[1]),
        rejections=[
            [r.get("path") or r.get("uri") or r.get("id", "?"), r.get("reason", "?")] for r in run.dataset.rejections
        ],
    )


# ------------------------------------------------------------------------------------ training

_TRAINING = """{%- if summary is none %}
{{ missing("No training record: training did not finish.") }}
{%- else %}
<p>Model <code>{{ field("model") }}</code> ({{ field("task") }}
{%- if summary.get("model_reason") %}; chosen: {{ summary["model_reason"] }}{% endif %}) on {{ field("accelerator") }}
{{- " × " ~ field("replicas") }}, global batch {{ field("global_batch_size") }}, {{ field("precision") }}
{%- if summary.get("precision_reason") %} ({{ summary["precision_reason"] }}){% endif %}, learning rate
{{- " " ~ field("learning_rate") }}.</p>
<div class="cards">{{ card(num(summary.get("images_per_sec"), ",.0f"), "training images/s") }}
{{- card(field("epochs") ~ " × " ~ field("steps_per_epoch"), "epochs × steps") }}
{{- card(num(summary.get("train_seconds"), ",.1f"), "seconds training") }}</div>
{%- if run_lines %}
<ul>{% for line in run_lines %}<li>{{ line }}</li>{% endfor %}</ul>
{%- endif %}
{%- if task_part %}
{{ task_part }}
{%- endif %}
{%- if fit_lines %}
<p>Fitted to the training data (the options left on <code>auto</code>):</p><ul>
{%- for line in fit_lines %}<li>{{ line }}</li>{% endfor %}</ul>
{%- endif %}
{%- if not history %}
{{ missing("No per-epoch history in training.json.") }}
{%- else %}
<div class="charts">{{ figures | join("") }}</div>
{{ table(["epoch", "step"] + keys, rows, left=0) }}
{%- endif %}
{%- endif %}"""


def _metric_keys(history: Sequence[Mapping[str, Any]]) -> list[str]:
    skip = {"epoch", "step", "loss", "val_loss", "learning_rate"}
    keys = []
    for entry in history:
        for k in entry:
            if k not in skip and not k.startswith("val_") and k not in keys:
                keys.append(k)
    return keys


def _training_charts(history: Sequence[Mapping[str, Any]]) -> list[Markup]:
    """The loss and each logged metric per epoch, train and validation, as line charts."""
    epochs = [float(h.get("epoch", i + 1)) for i, h in enumerate(history)]

    def curve(key: str) -> Optional[tuple[list[float], list[float]]]:
        points = [(x, h[key]) for x, h in zip(epochs, history, strict=True) if isinstance(h.get(key), (int, float))]
        return ([p[0] for p in points], [float(p[1]) for p in points]) if points else None

    figures = []
    for key in ("loss", *_metric_keys(history)):
        series = {label: c for label, c in (("train", curve(key)), ("validation", curve("val_" + key))) if c}
        if series:
            limits = (0.0, 1.0) if "accuracy" in key or key in {"auc", "precision", "recall", "ap"} else None
            chart = charts.line_chart(
                f"{key} per epoch", series, "epoch", key, limits=limits, width_in=HALF_IN, integer_x=True
            )
            figures.append(Markup(chart))
    return figures


def _run_lines(summary: Mapping[str, Any]) -> list[str]:
    """What the budget bought and where the training ended (``training.json``'s ``budget``, ``stopping``)."""
    lines = []
    if summary.get("budget"):
        lines.append("Budget: " + layout.budget_line(summary["budget"]))
    if summary.get("stopping"):
        lines.append("Stopping: " + layout.stopping_line(summary["stopping"]))
    return lines


def training(run: RunRecords) -> Markup:
    """The run's figures, the task's part, what was fitted to the data, the loss and metrics per epoch.

    The task's part is the HTML its renderers made (``samples.json``: a classifier's accuracies, a
    detector's losses and fit); what was fitted is ``training.json``'s ``fit``, one item a line.
    """
    summary = run.training
    if summary is None:
        return _render(_TRAINING, summary=None)
    history = summary.get("history", []) or []
    keys = sorted({k for h in history for k in h if k not in ("epoch", "step")})
    return _render(
        _TRAINING,
        summary=summary,
        field=lambda name: summary.get(name, "?"),  # a figure the record lacks shows as ?
        task_part=Markup(run.task_parts.get("training", "")),
        fit_lines=(summary.get("fit") or {}).get("lines") or [],
        run_lines=_run_lines(summary),
        history=history,
        figures=_training_charts(history) if history else [],
        keys=keys,
        rows=[[h.get("epoch", ""), h.get("step", ""), *(_num(h.get(k)) for k in keys)] for h in history],
    )


# ------------------------------------------------------------------------------------ evaluation

_EVALUATION = """{%- if not evaluated %}
{{ missing("No evaluation: the step did not finish.") }}
{%- else %}
<div class="cards">{% for value, label in metrics %}{{ card(value, label) }}{% endfor %}</div>
{%- if heatmap %}
<div class="charts">{{ heatmap }}</div>
{%- endif %}
{%- if task_part %}
{{ task_part }}
{%- endif %}
<h3>Test images</h3>
{%- if not tiles %}
{{ missing("No image sample was published by the evaluation.") }}
{%- else %}
<p>{{ summary }}</p><div class="grid" id="samples"
 style="grid-template-columns:repeat(auto-fill,minmax({{ px + 16 }}px,1fr))">
{%- for caption, ok, item in tiles %}
<div class="tile{{ '' if ok else ' wrong' }}"><img alt="{{ caption[0] if caption else 'test image' }}"
 style="width:{{ px }}px" src="data:{{ item.get('mime', 'image/png') }};base64,{{ item.get('data', '') }}">
{{- caption | join(br) }}</div>
{%- endfor %}</div>
{%- endif %}
{%- endif %}"""


def _tile_text(item: Mapping[str, Any]) -> tuple[list[str], bool]:
    """A tile's caption lines and whether the model got it right (a sample of an earlier version: from its labels)."""
    if "caption" in item:
        return [str(line) for line in item.get("caption") or []], bool(item.get("ok"))
    caption = [f"true: {item.get('true')}", f"pred: {item.get('predicted')} ({_num(item.get('score'), '.0%')})"]
    return caption, item.get("true") == item.get("predicted")


def _sample(samples: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The image sample's tiles (caption lines, right or not, the image) and what is said above them."""
    items = [i for i in (samples or {}).get("images", []) if str(i.get("mime", "image/png")).startswith("image/")]
    if not items:
        return {"tiles": []}
    tiles = [(*_tile_text(item), item) for item in items]
    wrong = sum(1 for _, ok, _ in tiles if not ok)
    summary = samples.get("summary") or (
        f"{len(items)} of the first {samples.get('scanned', len(items))} {samples.get('split', '')} images, "
        f"mistakes first ({wrong} wrong, red)."
    )
    return {"tiles": tiles, "summary": summary, "px": int(samples.get("tile_px") or 56)}


def evaluation(run: RunRecords) -> Markup:
    """The metrics, the confusion matrix as a heatmap, the task's part, the image sample as tiles.

    The metrics are labelled as the run's task labels them; the heatmap is there where the task
    has a confusion matrix; a tile is framed red where the model erred.
    """
    if not run.evaluation:
        return _render(_EVALUATION, evaluated=False)
    shown = [(k, v) for k, v in run.evaluation.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    heatmap = None
    if run.confusion is not None:
        names, matrix = run.confusion
        heatmap = Markup(charts.heatmap("Confusion matrix", matrix, names, "predicted", "true", width_in=6.0))
    return _render(
        _EVALUATION,
        evaluated=True,
        metrics=[(_num(v, ",.0f" if k.startswith("num_") else ".4f"), _metric_label(run.task, k)) for k, v in shown],
        heatmap=heatmap,
        task_part=Markup(run.task_parts.get("evaluation", "")),
        br=Markup("<br>"),
        **_sample(run.samples),
    )


# ------------------------------------------------------------------------------------ gate

_GATE = """{%- if not blessing %}
{{ missing("No gate decision: the evaluation did not finish.") }}
{%- else %}
<div class="banner {{ 'ok' if blessed else 'bad' }}">{{ 'BLESSED' if blessed else 'NOT BLESSED' }}</div>
<ul class="reasons">{% for reason in blessing.get("reasons", []) %}<li>{{ reason }}</li>{% endfor %}</ul>
{%- if checks %}
{{ table(["check", "metric", "value", "threshold", "baseline", "passed"], checks, left=2) }}
{%- endif %}
<p>Baseline: prod's metrics {{ baseline or "none (prod served nothing)" }}.</p>
{%- endif %}"""


def gate(run: RunRecords) -> Markup:
    """The gate's decision and every reason, and its checks against thresholds and the baseline."""
    blessing = run.blessing or {}
    checks = [
        [c.get("kind", ""), c.get("metric", ""), _num(c.get("value")), _num(c.get("threshold")),
         _num(c.get("baseline")), "yes" if c.get("passed") else "no"]
        for c in blessing.get("checks", []) or []
    ]  # fmt: skip
    base = blessing.get("baseline")
    return _render(
        _GATE,
        blessing=run.blessing,
        blessed=bool(blessing.get("blessed")),
        checks=checks,
        baseline=json.dumps(base) if base else "",
    )


# ------------------------------------------------------------------------------------ benchmark

_BENCHMARK = """{%- if not row %}
{{ missing("No benchmark: the step did not finish.") }}
{%- else %}
<p>On {{ row.get("label", row.get("accelerator", "?")) }} ({{ row.get("cores", "?") }} cores,
{{- " $" ~ num(row.get("price_per_hour"), ",.2f") }}/hour, {{ row.get("price_source", "") }}):
{{- " " ~ num(row.get("images_per_dollar"), ",.0f") }} images per dollar.</p>
{{ table(["path", "images", "batch", "time (s)", "images/s", "p50 ms", "p95 ms", "p99 ms"], rows, left=1) }}
<div class="charts">{{ figures | join("") }}</div>
{%- endif %}
{%- if formats %}
<h3>Portable formats (against the served SavedModel, same run)</h3>
{{ table(formats[0], formats[1:], left=2) }}
{%- endif %}"""

# A benchmark row's columns: the key (after the path's prefix) and its format.
_BENCHMARK_COLUMNS = (
    ("num_images", ",.0f"),
    ("batch_size", ",.0f"),
    ("time_s", ",.3f"),
    ("images_per_sec", ",.0f"),
    ("latency_p50_ms", ",.2f"),
    ("latency_p95_ms", ",.2f"),
    ("latency_p99_ms", ",.2f"),
)


def _benchmark_charts(row: Mapping[str, Any], paths: Sequence[tuple[str, str]]) -> list[Markup]:
    """Throughput and batch latency per path (in process, REST)."""
    labels = [label for label, _ in paths]
    throughput = [row.get(p + "images_per_sec") for _, p in paths]
    latency = {label: [row.get(f"{p}latency_{q}_ms") for q in ("p50", "p95", "p99")] for label, p in paths}
    return [
        Markup(charts.bar_chart("Throughput", labels, throughput, "images/s", width_in=HALF_IN)),
        Markup(charts.grouped_bars("Batch latency", ["p50", "p95", "p99"], latency, "ms", width_in=HALF_IN)),
    ]


def benchmark(run: RunRecords) -> Markup:
    """The benchmark's table (in process and over REST) and its charts."""
    row, formats = run.benchmark, _format_table(run.export)
    if not row:
        return _render(_BENCHMARK, row=None, formats=formats)
    paths = [("in process", "")]
    if row.get("http_images_per_sec") is not None:
        paths.append((f"REST ({row.get('http_server') or 'server not recorded'})", "http_"))
    rows = [[label, *(_num(row.get(p + key), spec) for key, spec in _BENCHMARK_COLUMNS)] for label, p in paths]
    return _render(_BENCHMARK, row=row, rows=rows, figures=_benchmark_charts(row, paths), formats=formats)


def _format_table(record: Optional[Mapping[str, Any]]) -> list[list[str]]:
    """The export's format table (headers first); empty without an export."""
    from trainer.export.formats import ExportRow, table_cells

    if not record or not record.get("rows"):
        return []
    heads, cells = table_cells(
        [ExportRow.from_dict(r) for r in record["rows"]], record["headline"], record["agreement"]
    )
    return [heads, *cells]


# ------------------------------------------------------------------------------------ stages

_STAGES = """{%- if stages is none %}
{{ missing("No stage store was given.") }}
{%- endif %}
{%- for stage in stages or () %}
{%- for model in stage.models %}
<h3>{{ stage.stage }}: serves {{ model.name }} version {{ model.current.entry.version }}
{{- model.form }} from run {{ model.current.entry.run }}
{%- if model.value is not none %}, {{ model.label }} {{ num(model.value) }}{% endif %}</h3>
{%- if model.rows %}
{{ table(["time", "action", "version", "run", "score", "checks", "reason"], model.rows, left=4) }}
{%- else %}
{{ missing("No history yet.") }}
{%- endif %}
{%- for block in model.drift %}
{{ block }}
{%- endfor %}
{%- else %}
<h3>{{ stage.stage }}: serves nothing</h3>
{%- endfor %}
{%- endfor %}"""


def _served(model: ServedModel) -> dict[str, Any]:
    """A served model's heading values (its headline) and history rows, for the template."""
    label, value = task_headline(model.current.task, model.current.entry.metrics)
    rows = [
        [
            s.entry.time,
            s.entry.action,
            "none" if s.entry.version is None else f"{s.entry.version}{_form(s.entry.serving_format)}",
            s.entry.run,
            _num(task_headline(s.task, s.entry.metrics)[1]),
            f"{sum(1 for c in s.entry.checks if c.passed)}/{len(s.entry.checks)}",
            s.entry.reason or "",
        ]
        for s in model.history
    ]
    return {"name": model.name, "current": model.current, "label": label, "value": value, "rows": rows,
            "drift": _drift_blocks(model.drift), "form": _form(model.current.entry.serving_format)}  # fmt: skip


def _form(serving_format: Optional[str]) -> str:
    """`` as <format>`` for a version served in a portable format; "" for the SavedModel."""
    return f" as {serving_format}" if serving_format not in (None, "saved_model") else ""


def _drift_blocks(history: Optional[DriftHistory]) -> list[Markup]:
    """The served model's sampled traffic: the newest window's verdict and each figure over the windows."""
    if history is None or not history.windows:
        return []
    (verdict,) = latest_lines([history])
    return [_render("<p><b>Traffic</b> ({{ line }})</p>", line=verdict), *history_blocks(history)]


def stages(run: RunRecords) -> Markup:
    """What each stage serves (every model, by name, with its headline), and each model's history, newest first."""
    shown = None
    if run.stages is not None:
        shown = [{"stage": s.stage, "models": [_served(m) for m in s.models]} for s in run.stages]
    return _render(_STAGES, stages=shown)


# ------------------------------------------------------------------------------------ the page's top

_HEADER = (
    "<header><h1>{{ title }}</h1><p class=muted>Run <code>{{ run }}</code>: {{ status }}.</p>"
    '<nav>{% for anchor, text, _ in links %}<a href="#{{ anchor }}">{{ text }}</a>{% endfor %}</nav></header>'
)

_GLANCE = '<div class="cards" id="glance">{% for value, label in cards %}{{ card(value, label) }}{% endfor %}</div>'


def glance(run: RunRecords) -> Markup:
    """The run's figures in one row of cards, above the sections."""
    evaluation, training, bench = run.evaluation or {}, run.training or {}, run.benchmark or {}
    cards = [("failed" if run.failure else "succeeded", "run")]
    label, value = task_headline(run.task, evaluation)
    if value is not None:
        cards.append((_num(value), label))
    if run.blessing:
        cards.append(("blessed" if run.blessing.get("blessed") else "not blessed", "gate"))
    if training.get("images_per_sec") is not None:
        cards.append((_num(training["images_per_sec"], ",.0f"), "training images/s"))
    if bench.get("images_per_sec") is not None:
        cards.append((_num(bench["images_per_sec"], ",.0f"), "inference images/s"))
    if run.steps:
        took = sum(s.seconds or 0.0 for s in run.steps)
        cards.append((f"{took:,.0f} s", f"{sum(1 for s in run.steps if s.status != 'not run')} steps"))
    return _render(_GLANCE, cards=cards)


# The sections in the page's order: anchor, title (also the header's links) and the section's body.
SECTIONS: tuple[tuple[str, str, Callable[[RunRecords], Markup]], ...] = (
    ("steps", "Steps", steps),
    ("parameters", "Parameters", parameters),
    ("dataset", "Dataset", dataset),
    ("training", "Training", training),
    ("evaluation", "Evaluation", evaluation),
    ("gate", "Gate", gate),
    ("benchmark", "Benchmark", benchmark),
    ("stages", "Stages", stages),
)


def header(run: RunRecords) -> Markup:
    """The page's title, the run's name and status, and a link to each section."""
    status = "failed" if run.failure is not None else "finished"
    return pages.fragment(_HEADER, title=run.title, run=run.run or "?", status=status, links=SECTIONS)


def section(anchor: str, run: RunRecords) -> Markup:
    """One section of the page, by its anchor, in its frame (``<section id=...>`` and its heading).

    Raises:
        KeyError: no section has that anchor.
    """
    title, body = {a: (t, b) for a, t, b in SECTIONS}[anchor]
    return pages.fragment(_SECTION, anchor=anchor, title=title, body=body(run))


def blocks(run: RunRecords) -> list[Markup]:
    """The page's content in order: the header, the run at a glance, every section."""
    return [header(run), glance(run), *(section(anchor, run) for anchor, _, _ in SECTIONS)]
