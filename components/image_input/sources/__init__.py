"""Sources of images: scanning them into light items, loading one item's pixels or bytes, and
listing the images batch prediction scores.

A source is scanned once, in the parent process, into :class:`Item` records (a key, a label, maybe a
split, and a reference to the bytes), never the images themselves. Worker processes rebuild a
:class:`Loader` from :meth:`Source.spec` (plain data, cheap to pickle) and read the bytes of the
items they were given, so memory stays bounded whatever the size of the source.

The convert step and batch prediction both go through it: a kind opens a source into items to
convert (:meth:`SourceKind.open`) and lists its images to score (:meth:`SourceKind.prediction_listing`).

One module per kind, listed in :mod:`components.image_input.sources.registry`: ``folder`` (one
subfolder per class), ``csv``/``jsonl`` manifests, ``npz``, ``idx`` (MNIST-style, optionally
gzipped), ``coco`` (detection JSON), the labelling tools' exports ``yolo``, ``voc`` and
``label-studio`` (their shared parts in ``labels.py``), and the built-in ``fashion-mnist``, ``digits`` and ``shapes``
(detection, generated: :mod:`components.image_input.shapes`). Local paths and gs:// URIs. An
extension module (``LTP_EXTENSIONS``) adds its own kinds with :func:`register_kind`.
"""

from components.image_input.sources.base import (
    Box,
    Claim,
    ConvertError,
    ImageBoxes,
    InputError,
    Item,
    Listing,
    PredictItem,
    Source,
    SourceError,
    SourceKind,
    digest,
    fingerprint,
)
from components.image_input.sources.fashion_mnist import FASHION_MNIST_DIR
from components.image_input.sources.idx import IdxImages, read_idx
from components.image_input.sources.registry import (
    BUILTIN_KINDS,
    Loader,
    claim_order,
    detect,
    expected,
    is_builtin,
    kind,
    kind_names,
    kinds,
    loader,
    open_source,
    prediction_listing,
    register_kind,
)

__all__ = [
    "BUILTIN_KINDS",
    "FASHION_MNIST_DIR",
    "Box",
    "Claim",
    "ConvertError",
    "IdxImages",
    "ImageBoxes",
    "InputError",
    "Item",
    "Listing",
    "Loader",
    "PredictItem",
    "Source",
    "SourceError",
    "SourceKind",
    "claim_order",
    "detect",
    "digest",
    "expected",
    "fingerprint",
    "is_builtin",
    "kind",
    "kind_names",
    "kinds",
    "loader",
    "open_source",
    "prediction_listing",
    "read_idx",
    "register_kind",
]
