"""A stage version served in a portable format (LiteRT, ONNX, OpenVINO) behind TensorFlow Serving's REST contract.

A version folder stays a SavedModel (TensorFlow Serving, the contract and the checks read it);
when a promotion chose another form (``PromoteConfig.serving_format``), the folder also holds it::

    <stage>/models/<model_name>/<version>/portable/<file>           the format's file (model_int8.tflite, ...;
                                                                    an OpenVINO IR's model.bin beside its model.xml)
    <stage>/models/<model_name>/<version>/portable/serving.json     what serves it, written last

``serving.json``: ``{"format": "litert_int8", "file": "model_int8.tflite", "task": "classification",
"model_options": {...}, "class_names": [...]}``. A folder without it is served as its SavedModel.

:class:`PortableModel` answers ``:predict`` as :class:`~components.serving.model.Model` does, with
the same signatures (read from the version's ``saved_model.pb``: same inputs, output keys, dtypes
and shapes), through the format's runtime for the model body and the task's own code around it
(``trainer.tasks.portable``: decoding, a detector's letterbox, box decoding and per-class NMS).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from components.serving.metrics import ServingMetrics
from components.serving.model import Model
from trainer import model_folder, storage
from trainer.export.formats import EXPORT_DIR, FORMATS, SERVED

PORTABLE_DIR = "portable"
SERVING_FILE = "serving.json"
BYTES_SIGNATURE, TENSORS_SIGNATURE = "serving_default", "serving_tensors"


def served_format(version_dir: str) -> str:
    """The form a version folder is served in: its ``serving.json``'s format, else ``saved_model``."""
    data = storage.read_json(storage.join(version_dir, PORTABLE_DIR, SERVING_FILE))
    return str(data["format"]) if data else SERVED


def publish_format(
    version_dir: str,
    fmt: str,
    sources: Sequence[str],
    task: str,
    model_options: Mapping[str, Any],
    class_names: Optional[Sequence[str]],
) -> None:
    """Makes a published version serve ``fmt``: its file and ``serving.json`` (last) under ``portable/``.

    ``saved_model`` removes ``portable/``. Re-running with the same format rewrites the same files.

    Args:
        version_dir: the stage's version folder (a SavedModel).
        fmt: ``saved_model`` or a format of ``trainer.export.formats.FORMATS``.
        sources: folders to take the format's file from, the first that has it: a model folder's
            ``export/``, another stage's ``portable/``.
        task: the model's task.
        model_options: its options (a detector's anchors come from them).
        class_names: the classes in class-index order (a detector names its boxes' classes).

    Raises:
        FileNotFoundError: no source has the format's file.
    """
    folder = storage.join(version_dir, PORTABLE_DIR)
    marker = storage.join(folder, SERVING_FILE)
    if fmt == SERVED:
        storage.delete_tree(folder)
        return
    file = FORMATS[fmt].file
    found = next((s for s in sources if s and storage.exists(storage.join(s, file))), None)
    if found is None:
        raise FileNotFoundError(f"serving_format {fmt}: {file} is in none of {list(sources)}; export the model again")
    if found.rstrip("/") == folder.rstrip("/"):
        storage.delete(marker)  # a folder without it serves the SavedModel until it is written again
    else:
        storage.delete_tree(folder)  # another stage's form, copied with its version folder, goes
        for each in FORMATS[fmt].files:  # an OpenVINO IR's weights go with its graph
            storage.copy_file(storage.join(found, each), storage.join(folder, each))
    record = {
        "format": fmt,
        "file": file,
        "task": task,
        "model_options": dict(model_options),
        "class_names": None if class_names is None else list(class_names),
    }
    storage.write_text(marker, json.dumps(record, indent=1, sort_keys=True))


def format_sources(model_uri: str, version_dir: str) -> list[str]:
    """Where a version's portable files are: its model folder's ``export/``, else the folder's own ``portable/``."""
    return [storage.join(model_uri, EXPORT_DIR) if model_uri else "", storage.join(version_dir, PORTABLE_DIR)]


def load_model(name: str, version: int, path: Path, max_batch_size: int, metrics: Optional[ServingMetrics]) -> Model:
    """The served model of a version folder: :class:`PortableModel` where it holds ``serving.json``."""
    if (Path(path) / PORTABLE_DIR / SERVING_FILE).is_file():
        return PortableModel(name, version, path, max_batch_size, metrics)
    return Model(name, version, path, max_batch_size, metrics)


def _specs(saved_model_dir: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each signature's input and output TensorSpecs, read from ``saved_model.pb`` (nothing is loaded)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())

    def spec(info: Any) -> Any:
        shape = (
            None if info.tensor_shape.unknown_rank else [d.size if d.size >= 0 else None for d in info.tensor_shape.dim]
        )
        return tf.TensorSpec(shape, tf.dtypes.as_dtype(info.dtype))

    return {
        key: ({k: spec(v) for k, v in sig.inputs.items()}, {k: spec(v) for k, v in sig.outputs.items()})
        for key, sig in proto.meta_graphs[0].signature_def.items()
        if key in (BYTES_SIGNATURE, TENSORS_SIGNATURE)
    }


def _runner(fmt: str, path: str, names: Sequence[str]) -> Any:
    from trainer.export import litert, onnx, openvino

    module = FORMATS[fmt].module
    if module == "ai_edge_litert":
        return litert.Runner(path, names)
    return openvino.Runner(path) if module == "openvino" else onnx.Runner(path)


def trained_options(model_uri: str, version_dir: str) -> dict[str, Any]:
    """A model's options: its folder's ``config.yaml`` (as trained), else a version folder's ``serving.json``."""
    import yaml

    config = storage.join(model_uri, model_folder.CONFIG) if model_uri else ""
    if config and storage.exists(config):
        return dict((yaml.safe_load(storage.read_text(config)) or {}).get("model_options") or {})
    served = storage.read_json(storage.join(version_dir, PORTABLE_DIR, SERVING_FILE)) or {}
    return dict(served.get("model_options") or {})


class PortableRunner:
    """A format's runtime with the task's code around it: the served SavedModel's outputs, as NumPy.

    Args:
        fmt: a format of ``trainer.export.formats.FORMATS``.
        path: its local file.
        task: the model's task.
        model_options: its options.
        class_names: the classes in class-index order.
        shape: the body's ``(height, width, channels)``.
    """

    def __init__(
        self,
        fmt: str,
        path: str,
        task: str,
        model_options: Mapping[str, Any],
        class_names: Sequence[str],
        shape: tuple[int, int, int],
    ):
        from trainer.tasks import get_task

        self.format, self.shape = fmt, tuple(shape)
        self._facet = get_task(task, dict(model_options)).portable()
        self._facet.bind(list(class_names), self.shape)
        self._runner = _runner(fmt, path, self._facet.raw_outputs)
        self._lock = threading.Lock()  # a LiteRT interpreter runs one batch at a time

    def _answer(self, images: np.ndarray, context: Any) -> dict[str, np.ndarray]:
        with self._lock:
            raw = self._runner(images)
        return self._facet.serving_outputs(raw, context)

    def from_bytes(self, encoded: Sequence[bytes]) -> dict[str, np.ndarray]:
        """``serving_default``'s outputs for encoded images."""
        images, context = self._facet.serving_inputs(encoded, self.shape)
        return self._answer(images, context)

    def from_tensors(self, images: np.ndarray) -> dict[str, np.ndarray]:
        """``serving_tensors``' outputs for decoded images."""
        array = np.asarray(images, dtype=np.float32)
        return self._answer(array, self._facet.tensor_inputs(len(array), self.shape))


def version_runner(version_dir: Path) -> PortableRunner:
    """The runner of a version folder's ``serving.json`` (its shape read from ``saved_model.pb``).

    Raises:
        ModuleNotFoundError: the format's runtime is not installed here (the message names it).
    """
    from trainer.export.serving import installed

    record = json.loads((version_dir / PORTABLE_DIR / SERVING_FILE).read_text())
    if not installed(record["format"]):
        runtime = FORMATS[record["format"]].runtime
        raise ModuleNotFoundError(
            f"{version_dir} is served as {record['format']}, whose runtime {runtime} is not installed here; "
            f"install it (pip install {runtime})"
        )
    shape = tuple(int(d) for d in _specs(version_dir)[TENSORS_SIGNATURE][0]["images"].shape[1:])
    file = str(version_dir / PORTABLE_DIR / record["file"])
    options = record.get("model_options") or {}
    return PortableRunner(record["format"], file, record["task"], options, record.get("class_names") or [], shape)


class PortableModel(Model):
    """A version served through its portable format's runtime; the SavedModel's REST contract kept."""

    def __init__(self, name: str, version: int, path: Path, max_batch_size: int, metrics: Optional[ServingMetrics]):
        import tensorflow as tf

        from components.serving.model import Signature

        self.name, self.version, self.path = name, version, Path(path)
        self.max_batch_size, self.metrics, self._tf = max_batch_size, metrics, tf
        began = time.perf_counter()
        try:
            specs = _specs(self.path)
            self.runner = version_runner(self.path)
        except Exception:
            if metrics is not None:
                metrics.record_load(str(self.path / PORTABLE_DIR), ok=False)
            raise
        if metrics is not None:
            metrics.record_load(str(self.path / PORTABLE_DIR), ok=True, latency_us=(time.perf_counter() - began) * 1e6)
        calls = {BYTES_SIGNATURE: self._from_bytes, TENSORS_SIGNATURE: self._from_tensors}
        self.signatures = {key: Signature.of(calls[key], *specs[key]) for key in sorted(specs)}

    def _from_bytes(self, image_bytes: Any) -> dict[str, Any]:
        outputs = self.runner.from_bytes(list(image_bytes.numpy()))
        return {key: self._tf.constant(value) for key, value in outputs.items()}

    def _from_tensors(self, images: Any) -> dict[str, Any]:
        outputs = self.runner.from_tensors(images.numpy())
        return {key: self._tf.constant(value) for key, value in outputs.items()}


def tensor_function(
    fmt: str, model_uri: str, saved_model: str, task: str, class_names: Sequence[str], shape: tuple[int, int, int]
) -> Any:
    """``function(images=...) -> serving_tensors' outputs`` (tensors) through a format's runtime, for
    batch prediction: the file from the model's ``export/``, else the version folder's ``portable/``.

    Raises:
        FileNotFoundError: neither has the format's file.
    """
    import tensorflow as tf

    file = FORMATS[fmt].file
    found = [s for s in format_sources(model_uri, saved_model) if s and storage.exists(storage.join(s, file))]
    if not found:
        raise FileNotFoundError(f"serving_format {fmt}: no {file} under {model_uri or saved_model}")
    with_local = storage.join(found[0], file)
    if storage.is_gcs(with_local):  # the runtimes read local files
        local = tempfile.mkdtemp(prefix="portable-")
        for each in FORMATS[fmt].files:  # an OpenVINO IR's weights go with its graph
            storage.copy_file(storage.join(found[0], each), os.path.join(local, each))
        with_local = os.path.join(local, file)
    options = trained_options(model_uri, saved_model)
    runner = PortableRunner(fmt, with_local, task, options, class_names, shape)

    def function(**inputs: Any) -> dict[str, Any]:
        (images,) = inputs.values()
        return {key: tf.constant(value) for key, value in runner.from_tensors(np.asarray(images)).items()}

    function.runner = runner  # kept alive with the function
    return function
