"""Pretrained weights by name: keras-hub presets and weights files, one reader for every task.

A weights option (``model_options.weights``, ``model_options.backbone_weights``) names one of:

- a weights file (``*.weights.h5`` or ``*.h5``, local or gs://), loaded into the model the
  options build (the architecture must be the same);
- a keras-hub preset directory (local or gs://): ``config.json`` and ``model.weights.h5`` as
  ``save_to_preset`` writes them; a detection run writes one to ``preset/`` in its model folder;
- a keras-hub preset handle: a built-in name (``retinanet_resnet50_fpn_coco``), ``kaggle://...``
  or ``hf://...``. keras-hub downloads it on first use (into ``$KERAS_HOME``, else
  ``~/.keras``, and kagglehub's or huggingface_hub's cache), which needs the network and, for
  gated or private models, credentials (``KAGGLE_USERNAME``/``KAGGLE_KEY``, ``HF_TOKEN``). A
  cluster without them loads a gs:// mirror of the preset directory instead.

Every failure is a :class:`PresetError` that says what to do: a preset that does not exist, a
hub that cannot be reached, a preset of another architecture. Nothing here imports TensorFlow
or keras-hub at import time.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from typing import Any, Optional

from trainer import storage
from trainer.errors import TaskError

log = logging.getLogger(__name__)

HUB_SCHEMES = ("kaggle", "hf", "modelscope")
WEIGHTS_SUFFIXES = (".weights.h5", ".h5")
PRESET_CONFIG = "config.json"  # keras-hub's backbone config, the mark of a preset directory
PRESET_TASK = "task.json"  # the whole task (heads and preprocessing), when the preset has one
IMAGE_CONVERTER = "image_converter.json"
PREPROCESSOR = "preprocessor.json"
CREDENTIALS_HINT = (
    "a kaggle:// handle or built-in name needs access to kaggle.com (gated models also "
    "KAGGLE_USERNAME and KAGGLE_KEY), an hf:// handle huggingface.co (private models HF_TOKEN); "
    "without them, copy the preset directory once (keras-hub save_to_preset) to gs:// and give that path"
)


class PresetError(TaskError):
    """Weights that cannot be loaded: unknown, unreachable, or of another architecture."""


@dataclasses.dataclass(frozen=True)
class WeightsSource:
    """A weights option, resolved.

    Attributes:
        spec: the option's value, as given.
        kind: ``file`` (a weights file) or ``preset`` (a keras-hub preset).
        location: the file or preset to load: a local path, a gs:// URI or a hub handle.
        hub: whether loading it downloads from a model hub.
    """

    spec: str
    kind: str
    location: str
    hub: bool

    def describe(self) -> str:
        """How the log names it."""
        where = "hub preset" if self.hub else ("preset directory" if self.kind == "preset" else "weights file")
        return f"{where} {self.spec!r}"


def brief(err: BaseException, limit: int = 200) -> str:
    """An exception's message on one line, cut to ``limit`` characters (Keras' run to pages)."""
    text = " ".join(str(err).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def builtin_presets() -> dict[str, str]:
    """keras-hub's built-in preset names and their Kaggle handles (no download)."""
    import keras_hub  # noqa: F401 - registers the built-in presets
    from keras_hub.src.utils import preset_utils

    return {name: p["kaggle_handle"] for name, p in preset_utils.BUILTIN_PRESETS.items()}


def _scheme(spec: str) -> Optional[str]:
    return spec.split("://", 1)[0].lower() if "://" in spec else None


def resolve_weights(spec: str, option: str, suggest: tuple[str, ...] = ()) -> WeightsSource:
    """What a weights option names; checks that a file or a preset directory exists (no download).

    Args:
        spec: the option's value.
        option: the option's name, for messages (``model_options.weights``).
        suggest: preset names the message suggests when ``spec`` is nothing known.

    Raises:
        PresetError: not a weights file, a preset directory, a hub handle nor a built-in name.
    """
    scheme = _scheme(spec)
    if scheme in HUB_SCHEMES:
        return WeightsSource(spec, "preset", spec, hub=True)
    if spec.endswith(WEIGHTS_SUFFIXES):
        if not storage.exists(spec):
            raise PresetError(
                f"{option}: the weights file {spec!r} does not exist; give an existing local or gs:// file"
            )
        return WeightsSource(spec, "file", spec, hub=False)
    if scheme is not None or os.path.isabs(spec) or spec.startswith(".") or os.sep in spec:
        if storage.exists(storage.join(spec, PRESET_CONFIG)):
            return WeightsSource(spec, "preset", spec, hub=False)
        raise PresetError(
            f"{option}: {spec!r} is not a keras-hub preset directory (no {PRESET_CONFIG} there); give a folder "
            "written by keras-hub's save_to_preset (a detection run writes one to preset/ in its model folder), "
            f"a *.weights.h5 file, or a preset name such as {', '.join(suggest) or 'retinanet_resnet50_fpn_coco'}"
        )
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, PRESET_CONFIG)):
        return WeightsSource(spec, "preset", spec, hub=False)
    if spec in builtin_presets():
        return WeightsSource(spec, "preset", spec, hub=True)
    raise PresetError(
        f"{option}: unknown preset {spec!r}: not a file, a preset directory nor a keras-hub preset name; "
        f"known here: {', '.join(suggest) or 'see keras_hub.models.Backbone.presets'}, or a kaggle:// or "
        "hf:// handle, or a local or gs:// preset directory"
    )


def _hub_error(source: WeightsSource, option: str, err: Exception) -> PresetError:
    """The one error for a preset that failed to load: not there, not reachable, or not allowed.

    keras-hub turns a hub's "not found" and huggingface_hub's "offline and not cached" alike into
    a ValueError ("has no config.json"), so those two cannot be told apart: the message says both.
    """
    if isinstance(err, OSError) and not isinstance(err, FileNotFoundError):
        return PresetError(
            f"{option}: cannot download {source.spec!r} from its hub ({type(err).__name__}: {brief(err)}); "
            f"{CREDENTIALS_HINT}"
        )
    if not source.hub:
        return PresetError(f"{option}: {source.spec!r} is not a readable keras-hub preset ({brief(err)})")
    return PresetError(
        f"{option}: cannot load {source.spec!r}: the hub has no such preset, or it cannot be reached or needs "
        f"credentials ({type(err).__name__}: {brief(err)}). Check the handle "
        "(kaggle://<org>/<model>/keras/<variant>[/<version>], hf://<org>/<model>); "
        f"{CREDENTIALS_HINT}"
    )


def preset_loader(source: WeightsSource, option: str) -> Any:
    """keras-hub's loader of a preset (it reads ``config.json``; a hub handle downloads it).

    Raises:
        PresetError: the hub has no such preset, cannot be reached, or refuses without credentials.
    """
    from keras_hub.src.utils import preset_utils

    try:
        return preset_utils.get_preset_loader(source.location)
    except (OSError, ValueError) as err:  # requests' ConnectionError and HTTP errors are OSErrors
        raise _hub_error(source, option, err) from err


def preset_json(loader: Any, name: str) -> Optional[dict[str, Any]]:
    """A JSON file of a preset, or None when the preset has none."""
    from keras_hub.src.utils import preset_utils

    if not preset_utils.check_file_exists(loader.preset, name):
        return None
    return preset_utils.load_json(loader.preset, name)


def registered_name(config: Optional[dict[str, Any]]) -> str:
    """The class a serialized keras-hub object is (``keras_hub>RetinaNetBackbone``), or ``none``."""
    return str((config or {}).get("registered_name", "none"))


def check_class(loader: Any, expected: type, option: str, fix: str) -> type:
    """The preset's backbone class, which must be ``expected`` or a subclass.

    Raises:
        PresetError: the preset holds another architecture.
    """
    cls = loader.check_backbone_class()
    if not (isinstance(cls, type) and issubclass(cls, expected)):
        raise PresetError(
            f"{option}: the preset {loader.preset!r} holds a {getattr(cls, '__name__', cls)}, "
            f"not a {expected.__name__}: weights of another architecture; {fix}"
        )
    return cls


def _per_channel(value: Any, default: float) -> list[float]:
    if isinstance(value, (list, tuple)):
        return [float(v) for v in value]
    return [float(default if value is None else value)] * 3


def pixel_scale_of(loader: Any) -> Optional[tuple[list[float], list[float]]]:
    """The preset's pixel scaling ``(scale, offset)`` per channel, applied to 0..255 pixels; None: none.

    keras-hub keeps it in the image converter (``image_converter.json``, or inside the task's
    preprocessor), e.g. ImageNet's mean and standard deviation for COCO and ImageNet presets; a
    preset this project saved keeps it as the task's ``Rescaling`` preprocessor of [0, 1] pixels.
    """
    task = preset_json(loader, PRESET_TASK) or {}
    pre = (task.get("config") or {}).get("preprocessor") or {}
    if registered_name(pre).endswith("Rescaling") or pre.get("class_name") == "Rescaling":
        inner = pre.get("config", {})
        scale = _per_channel(inner.get("scale"), 1.0)
        return [s / 255.0 for s in scale], _per_channel(inner.get("offset"), 0.0)
    config = preset_json(loader, IMAGE_CONVERTER) or (pre.get("config") or {}).get("image_converter")
    inner = (config or {}).get("config", {})
    if inner.get("scale") is None and inner.get("offset") is None:
        return None
    return _per_channel(inner.get("scale"), 1.0), _per_channel(inner.get("offset"), 0.0)


def unit_rescaling(scale_offset: Optional[tuple[list[float], list[float]]]) -> Any:
    """A Keras layer applying a preset's pixel scaling to the project's images in [0, 1]; None for none."""
    import keras

    if scale_offset is None:
        return None
    scale, offset = scale_offset
    return keras.layers.Rescaling([255.0 * s for s in scale], offset=list(offset), dtype="float32", name="pixels")


def local_file(uri: str) -> str:
    """A local copy of a (possibly gs://) file, for loaders that read local files only (h5py)."""
    if not storage.is_gcs(uri):
        return uri
    path = os.path.join(tempfile.mkdtemp(prefix="weights-"), os.path.basename(uri))
    storage.copy_file(uri, path)
    return path


def load_weights_file(model: Any, source: WeightsSource, option: str) -> None:
    """``model.load_weights`` of a weights file, a mismatch reported as another architecture.

    Raises:
        PresetError: the file holds weights of another architecture (Keras' ValueError).
    """
    try:
        model.load_weights(local_file(source.location))
    except ValueError as err:
        raise PresetError(
            f"{option}: {source.spec!r} does not fit the {model.name} these options build ({brief(err, 300)}): "
            "weights of another architecture; give the options it was trained with, or a preset directory "
            "(which carries its architecture)"
        ) from err


def save_preset(model: Any, preset_dir: str) -> str:
    """``model.save_to_preset`` into a local or gs:// folder (written locally, then copied)."""
    if not storage.is_gcs(preset_dir):
        model.save_to_preset(preset_dir)
        return preset_dir
    with tempfile.TemporaryDirectory(prefix="preset-") as tmp:
        model.save_to_preset(tmp)
        storage.copy_tree(tmp, preset_dir, last=(PRESET_CONFIG,))
    return preset_dir
