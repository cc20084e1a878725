"""The export step: a blessed model's portable forms, each converted, checked, timed and priced.

From the float32 rebuild of the trained model (``trainer.export.rebuild``), each format asked for
is written under ``<model>/export/`` and run through its own runtime on the same test images:
the task's metrics (through the task's facet, ``trainer.tasks.portable``: the detector's decoding
and NMS included), agreement with the rebuild and with the served SavedModel, images/s and
latency at batch 1 and at the benchmark's batch, images per dollar at the step's price key,
against the served SavedModel timed in the same run. A conversion that crashes is a refused row,
never a failed step; ``export.json`` (the rows) is written last.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

import numpy as np

from components.export.config import ExportConfig
from trainer import model_folder, storage
from trainer.export import formats
from trainer.export.formats import ExportRow, Speed
from trainer.tasks.portable import Portable, Samples


def check_runtimes(names: tuple[str, ...]) -> None:
    """Each asked format's runtime is installed; else one line naming it and the fix."""
    for name in names:
        fmt = formats.FORMATS[name]
        if importlib.util.find_spec(fmt.module) is None:
            raise formats.ExportError(
                f"export format {name}: its runtime {fmt.runtime} is not installed in this image; install it "
                f"(pip install {fmt.runtime}) or leave {name} out of export_formats"
            )


def trained_task(model_dir: str) -> Any:
    """The model's task with the options it was trained with (its ``config.yaml``, where it has one)."""
    import yaml

    from trainer.tasks import get_task, task_of_model

    config_path = storage.join(model_dir, model_folder.CONFIG)
    if not storage.exists(config_path):
        return task_of_model(model_dir)
    options = (yaml.safe_load(storage.read_text(config_path)) or {}).get("model_options") or {}
    return get_task(task_of_model(model_dir).name, options)


def _note(config: ExportConfig, task: Any) -> str:
    """Why there is no export: not blessed (or no format asked for), or a task without portable forms."""
    if not config.export_formats:
        return "no export: the model was not blessed, or export_formats is empty"
    return f"no export: task {task.name!r} has no portable forms (its Task.portable gives none)"


Step = Callable[[np.ndarray], Any]
# Between two timed calls: the previous runtime's worker threads spin a while after their work
# (TensorFlow's, XNNPACK's, onnxruntime's); timed right after, the next runtime would share the cores.
_SETTLE_S = 0.05


def interleaved_speeds(steps: Mapping[str, Step], images: np.ndarray, batches: list[int], calls: int) -> dict:
    """Each step's speed at each batch size, timed in turns (one call of each, ``calls`` rounds).

    The served model and every format share whatever else the machine is doing: a noisy
    neighbour slows them alike instead of whichever ran during it. A step that raises is left out.

    Returns:
        name -> its :class:`Speed` list (one per batch size); a failing step: the exception instead.
    """
    took: dict[str, dict[int, list[float]]] = {name: {} for name in steps}
    failed: dict[str, Exception] = {}
    for batch in batches:
        chunk = images[: max(1, min(batch, len(images)))]
        for _ in range(calls + 1):  # the first round warms up (allocations, graph tracing)
            for name, step in steps.items():
                if name in failed:
                    continue
                time.sleep(_SETTLE_S)
                start = time.perf_counter()
                try:
                    step(chunk)
                except Exception as err:  # noqa: BLE001  (a runtime that fails refuses its format)
                    failed[name] = err
                    continue
                took[name].setdefault(len(chunk), []).append(time.perf_counter() - start)
    out: dict[str, Any] = dict(failed)
    for name in steps.keys() - failed.keys():
        out[name] = [_speed(size, times[1:]) for size, times in took[name].items()]
    return out


def _speed(batch: int, took: list[float]) -> Speed:
    p50, p95 = (float(np.percentile(took, q)) * 1e3 for q in (50, 95))
    return Speed(batch, batch / (p50 / 1e3), p50, p95)


def _raw_outputs(run: Callable[[np.ndarray], Mapping[str, Any]], images: np.ndarray, batch: int) -> dict:
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, len(images), batch):
        for name, value in run(images[start : start + batch]).items():
            parts.setdefault(name, []).append(np.asarray(value, dtype=np.float32))
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}


def _predictions(facet: Portable, raw: Mapping[str, np.ndarray], samples: Samples, batch: int) -> list[Any]:
    out: list[Any] = []
    for start in range(0, len(samples.images), batch):
        out.extend(facet.predictions({k: v[start : start + batch] for k, v in raw.items()}, samples.truth, start))
    return out


class Measured:
    """What the served model and the float32 rebuild gave: the references each format is held to."""

    def __init__(self, facet: Portable, samples: Samples, config: ExportConfig):
        self.facet, self.samples, self.config = facet, samples, config
        self.steps: dict[str, Step] = {}  # timed together at the end (interleaved_speeds)
        self.batches = sorted({1, min(config.batch_size, len(samples.images))})
        self.served: list[Any] = []
        self.rebuild_raw: dict[str, np.ndarray] = {}
        self.rebuild: list[Any] = []
        self.rebuild_metrics: dict[str, float] = {}

    def row(self, name: str, run: Callable[[np.ndarray], Mapping[str, Any]], size: Optional[int]) -> ExportRow:
        """A body's row: metrics, output error and agreements, speeds with the task's decoding."""
        facet, samples = self.facet, self.samples
        raw = _raw_outputs(run, samples.images, self.config.batch_size)
        predictions = _predictions(facet, raw, samples, self.config.batch_size)
        row = ExportRow(name, size_bytes=size, metrics=facet.metrics(predictions, samples.truth))
        if self.rebuild_raw:
            row.output_error = max(float(np.max(np.abs(raw[k] - self.rebuild_raw[k]))) for k in raw)
            row.agreement_rebuild = facet.agreement(self.rebuild, predictions)
        else:  # the first body measured is the float32 rebuild: every format's reference
            self.rebuild_raw, self.rebuild, self.rebuild_metrics = raw, predictions, row.metrics
        row.agreement_served = facet.agreement(self.served, predictions)

        def step(images: np.ndarray) -> Any:
            return facet.decode(run(images), samples.truth, 0)

        self.steps[name] = step
        return row

    def served_row(self, saved_model_dir: str) -> ExportRow:
        """The served SavedModel: scored through ``serving_default``, timed through ``serving_tensors``."""
        predict, timed = self.facet.served(saved_model_dir)
        encoded, batch = self.samples.encoded, self.config.batch_size
        self.served = [p for start in range(0, len(encoded), batch) for p in predict(encoded[start : start + batch])]
        row = ExportRow(formats.SERVED, "baseline", "what is served now", size_bytes=_tree_size(saved_model_dir))
        row.metrics = self.facet.metrics(self.served, self.samples.truth)
        row.agreement_served = 1.0
        self.steps[row.format] = timed
        return row

    def time(self, rows: list[ExportRow]) -> None:
        """Times every body measured, in turns; a format whose runtime fails then is refused."""
        speeds = interleaved_speeds(self.steps, self.samples.images, self.batches, self.config.timed_batches)
        for row in rows:
            found = speeds.get(row.format)
            if isinstance(found, Exception):
                row.status, row.reason = "refused", f"runtime failed while timed: {type(found).__name__}: {found}"
            elif found is not None:
                row.speeds = found


def _tree_size(folder: str) -> int:
    return sum(f.size for f in storage.list_info(folder, recursive=True))


def _frozen(traced: Any) -> Any:
    """The traced body with its variables folded in, made once for every LiteRT format."""
    from trainer.export import rebuild

    if not hasattr(traced, "frozen_body"):
        traced.frozen_body = rebuild.frozen(traced)
    return traced.frozen_body


def _convert(name: str, traced: Any, folder: str, calibration: np.ndarray, scheme: str) -> tuple[str, Optional[int]]:
    """Writes one format into ``folder``; returns its path and its Flex-op count (LiteRT only).

    An ONNX file already there (written for another format asked) is not converted again; an
    OpenVINO IR is converted from its ONNX file (``Format.source``), which stays in the export.
    """
    from trainer.export import litert, onnx, openvino

    fmt = formats.FORMATS[name]
    path = os.path.join(folder, fmt.file)
    if fmt.module == "ai_edge_litert":
        flat = litert.convert(_frozen(traced), calibration if fmt.int8 else None)
        with open(path, "wb") as f:
            f.write(flat)
        return path, litert.flex_ops(flat)
    if fmt.source:
        source = os.path.join(folder, formats.FORMATS[fmt.source].file)
        if not os.path.exists(source):
            _convert(fmt.source, traced, folder, calibration, scheme)
        openvino.convert(source, path)
        return path, None
    float_path = os.path.join(folder, formats.FORMATS["onnx"].file)
    if not os.path.exists(float_path):
        onnx.convert(traced, float_path)
    if fmt.int8 and not os.path.exists(path):
        onnx.quantize(float_path, path, calibration, scheme)
    return path, None


def _runner(name: str, path: str, names: list[str]) -> Callable[[np.ndarray], Mapping[str, Any]]:
    from trainer.export import litert, onnx, openvino

    module = formats.FORMATS[name].module
    if module == "ai_edge_litert":
        return litert.Runner(path, names)
    return openvino.Runner(path) if module == "openvino" else onnx.Runner(path)


def _size(name: str, folder: str) -> int:
    """The bytes of a format's files (an OpenVINO IR's graph and weights)."""
    return sum(os.path.getsize(os.path.join(folder, file)) for file in formats.FORMATS[name].files)


def _format_row(name: str, traced: Any, folder: str, calibration: np.ndarray, measured: Measured) -> ExportRow:
    """One format converted, run and gated; any failure of the conversion or the runtime is a refused row."""
    from trainer.export import rebuild

    config = measured.config
    try:
        path, flex = _convert(name, traced, folder, calibration, config.onnx_scheme)
        runner = _runner(name, path, rebuild.output_names(traced))
        row = measured.row(name, runner, _size(name, folder))
        row.flex_ops, row.precision = flex, getattr(runner, "precision", None)
    except Exception as err:  # noqa: BLE001  (a crashing converter or runtime refuses its format, not the run)
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return ExportRow(name, "refused", f"conversion or runtime failed: {type(err).__name__}: {first[:200]}")
    tolerance = config.export_tolerances.get(name)
    return formats.gate(row, measured.rebuild_metrics, measured.facet.headline, tolerance)


def _calibration(facet: Portable, dataset_dir: str, config: ExportConfig, shape: tuple[int, int, int]) -> np.ndarray:
    """A seeded draw of training images (from twice as many read), decoded as served."""
    from trainer import tfrecords

    info = tfrecords.load_dataset_info(dataset_dir)
    if "train" not in info.splits or info.splits["train"].count < 1:
        raise formats.ExportError(
            "int8 calibration needs the dataset's train split, which is empty or missing; "
            "leave the int8 formats out of export_formats"
        )
    images = facet.samples(dataset_dir, "train", config.calibration_images * 2, shape).images
    pick = np.random.default_rng(config.seed).permutation(len(images))[: config.calibration_images]
    return images[np.sort(pick)]


def _priced(rows: list[ExportRow], price_per_hour: Optional[float]) -> None:
    """Images per dollar at the benchmark's batch, and against the served SavedModel's."""
    from trainer.budget.pricing import images_per_dollar

    for row in rows:
        speed = row.at_batch()
        if speed and price_per_hour:
            row.images_per_dollar = images_per_dollar(speed.images_per_sec, price_per_hour)
    served = rows[0].images_per_dollar if rows else None
    for row in rows:
        if row.images_per_dollar and served:
            row.vs_served = row.images_per_dollar / served


def _keras_file(model_dir: str, folder: str) -> str:
    path = os.path.join(folder, model_folder.KERAS_MODEL)
    with open(path, "wb") as f:
        f.write(storage.read_bytes(storage.join(model_dir, model_folder.KERAS_MODEL)))
    return path


def _rows(model_dir: str, dataset_dir: str, config: ExportConfig, folder: str, log: Callable[[str], None]) -> tuple:
    """(the rows: served, float32 rebuild, each format; the facet), files under ``folder``."""
    from trainer.export import rebuild

    facet = trained_task(model_dir).portable()
    model = facet.load(_keras_file(model_dir, folder))
    shape = facet.input_shape(model)
    traced = rebuild.traced(facet.body(rebuild.float32_rebuild(model, shape)), shape)
    samples = facet.samples(dataset_dir, "test", config.eval_images, shape)
    measured = Measured(facet, samples, config)
    rows = [measured.served_row(model_folder.saved_model_dir(model_dir))]
    rows.append(measured.row("float32", traced, None))
    rows[-1].status, rows[-1].reason = "baseline", "the float32 rebuild every format is converted from"
    int8 = any(formats.FORMATS[n].int8 for n in config.export_formats)
    calibration = _calibration(facet, dataset_dir, config, shape) if int8 else np.zeros((0, *shape), np.float32)
    for name in config.export_formats:
        start = time.perf_counter()
        rows.append(_format_row(name, traced, folder, calibration, measured))
        log(f"{name}: converted and scored in {time.perf_counter() - start:.1f} s")
    measured.time(rows)
    for row in rows[2:]:
        log(formats.line(row, facet.headline))
    os.remove(os.path.join(folder, model_folder.KERAS_MODEL))
    return rows, facet


def run_export(
    model_dir: str, dataset_dir: str, config: ExportConfig, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Converts, checks, times and prices each format; publishes ``<model>/export/`` with ``export.json`` last.

    Returns:
        The record written (``export.json``): ``rows``, ``passed`` (best images per dollar
        first), ``headline``, ``agreement``, ``price_key``.

    Raises:
        ExportError: a runtime not installed, or calibration asked of a dataset without a training
            split (one line each, before any conversion).
    """
    from trainer.budget.pricing import load_price_table, price_in

    check_runtimes(config.export_formats)
    price = price_in(load_price_table(config.price_table), config.accelerator)
    task = trained_task(model_dir)
    portable = config.export_formats and task.portable() is not None
    with tempfile.TemporaryDirectory() as folder:
        rows, facet = _rows(model_dir, dataset_dir, config, folder, log) if portable else ([], None)
        _priced(rows, price)
        record = {
            "note": _note(config, task) if not portable else None,
            "headline": facet.headline if facet else None,
            "agreement": facet.agreement_name if facet else None,
            "price_key": config.accelerator,
            "rows": [r.to_dict() for r in rows],
            "passed": formats.passed(rows),
        }
        with open(os.path.join(folder, formats.RECORD), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
        storage.publish_tree(folder, storage.join(model_dir, formats.EXPORT_DIR), formats.RECORD)
    if facet is not None:
        _card(model_dir, rows, facet)
    return record


CARD_SECTION = "## Portable formats"


def _card(model_dir: str, rows: list[ExportRow], facet: Portable) -> None:
    """The format table in the model card, replacing an earlier run's (a re-run is idempotent)."""
    path = storage.join(model_dir, model_folder.MODEL_CARD)
    card = storage.read_text(path) if storage.exists(path) else ""
    kept = card.split(CARD_SECTION)[0].rstrip("\n")
    lines = [CARD_SECTION, "", *formats.table(rows, facet.headline, facet.agreement_name)]
    storage.write_text(path, (kept + "\n\n" if kept else "") + "\n".join(lines) + "\n")


def scalar_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """The Kubeflow UI's metrics of an export: per format, passed, the headline, images per dollar vs served."""
    out: dict[str, float] = {}
    for row in record.get("rows", []):
        name = row["format"]
        out[f"{name}_passed"] = 1.0 if row["status"] == "passed" else 0.0
        if record.get("headline") in row["metrics"]:
            out[f"{name}_{record['headline']}"] = float(row["metrics"][record["headline"]])
        if row.get("vs_served"):
            out[f"{name}_images_per_dollar_vs_served"] = float(row["vs_served"])
    return out


def render(record: Mapping[str, Any]) -> str:
    """The format table as a Markdown page (the component's report)."""
    if not record.get("rows"):
        return f"# Portable formats\n\n{record.get('note') or 'no export'}.\n"
    rows = [ExportRow.from_dict(r) for r in record["rows"]]
    lines = ["# Portable formats", "", *formats.table(rows, record["headline"], record["agreement"])]
    return "\n".join(lines) + "\n"


def export_step(model_dir: str, dataset_dir: str, config: ExportConfig) -> tuple[dict, dict, str]:
    """The step: :func:`run_export`, then its metrics and its report page."""
    record = run_export(model_dir, dataset_dir, config)
    return record, scalar_metrics(record), render(record)
