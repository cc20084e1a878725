"""The built-in detection data ``shapes`` (``shapes:<count>``): generated once, read as COCO."""

from __future__ import annotations

import dataclasses

from components.image_input.sources.base import Claim, Listing, Source, SourceError, SourceKind, fingerprint
from components.image_input.sources.coco import coco_listing, open_coco


def _count(uri: str) -> int:
    if uri == "shapes":
        from components.image_input.shapes import DEFAULT_COUNT

        return DEFAULT_COUNT
    text = uri.split(":", 1)[1]
    if not text.isdigit() or int(text) < 1:
        raise SourceError(f"bad built-in source {uri!r}: expected 'shapes' or 'shapes:<count>' (e.g. shapes:500)")
    return int(text)


class ShapesKind(SourceKind):
    """The built-in name ``shapes`` (3000 images) or ``shapes:<count>``: generated into the cache."""

    name = "shapes"
    description = "shapes (detection; shapes:<count> for another count)"
    claim = Claim.NAME

    def matches(self, uri: str) -> bool:
        return uri == self.name or uri.startswith(f"{self.name}:")

    def open(self, uri: str, classes: list[str] | None) -> Source:
        from components.image_input import shapes

        count = _count(uri)
        src = open_coco(str(shapes.cached(count)), "coco")
        src.kind, src.uri = self.name, uri
        # Where the cache lives is no part of the data: the fingerprint does not depend on it.
        src.fingerprint = fingerprint(["shapes", shapes.GENERATOR_VERSION, count, src.fingerprint])
        return src

    def prediction_listing(self, uri: str) -> Listing:
        """The generated images with their ids and boxes (the cache's COCO file, as kind ``shapes``)."""
        from components.image_input import shapes

        return dataclasses.replace(coco_listing(str(shapes.cached(_count(uri)))), kind=self.name)


SHAPES = ShapesKind()
