"""Images in: what the convert step and batch prediction both read, in one place (a shared package,
not a step).

- ``sources/``: the source kinds and their registry: which kind a source is (in the kinds' claim
  order), the items a conversion writes, the images a batch prediction scores.
- ``imaging.py``: image bytes: sniffing, header checks, conversion to what TensorFlow decodes,
  resizing, PNG encoding (no TensorFlow).
- ``exports.py``: predictions out to the labelling tools for review (Label Studio, CVAT, YOLO, VOC).
- ``shapes.py``: the generator of the built-in detection data ``shapes``.
- ``digits.npz``: the built-in ``digits`` data, shipped with the package.
"""
