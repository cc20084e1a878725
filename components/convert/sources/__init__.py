"""Sources of images: scanning them into light items, and loading one item's pixels or bytes.

A source is scanned once, in the parent process, into :class:`Item` records (a key, a label, maybe a
split, and a reference to the bytes), never the images themselves. Worker processes rebuild a
:class:`Loader` from :meth:`Source.spec` (plain data, cheap to pickle) and read the bytes of the
items they were given, so memory stays bounded whatever the size of the source.

One module per kind, listed in :mod:`components.convert.sources.registry`: ``folder`` (one subfolder
per class), ``csv``/``jsonl`` manifests, ``npz``, ``idx`` (MNIST-style, optionally gzipped), ``coco``
(detection JSON), and the built-in ``fashion-mnist``, ``digits`` and ``shapes`` (detection,
generated: :mod:`components.convert.shapes`). Local paths and gs:// URIs. An extension module
(``LTP_EXTENSIONS``) adds its own kinds with :func:`register_kind`.
"""

from components.convert.sources.base import (
    Box,
    ConvertError,
    ImageBoxes,
    Item,
    Source,
    SourceError,
    SourceKind,
    fingerprint,
)
from components.convert.sources.fashion_mnist import FASHION_MNIST_DIR
from components.convert.sources.idx import IdxImages, read_idx
from components.convert.sources.registry import (
    BUILTIN_KINDS,
    Loader,
    detect,
    expected,
    is_builtin,
    kind,
    kind_names,
    kinds,
    loader,
    open_source,
    register_kind,
)

__all__ = [
    "BUILTIN_KINDS",
    "FASHION_MNIST_DIR",
    "Box",
    "ConvertError",
    "IdxImages",
    "ImageBoxes",
    "Item",
    "Loader",
    "Source",
    "SourceError",
    "SourceKind",
    "detect",
    "expected",
    "fingerprint",
    "is_builtin",
    "kind",
    "kind_names",
    "kinds",
    "loader",
    "open_source",
    "read_idx",
    "register_kind",
]
