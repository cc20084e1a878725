"""Command line: ``python -m components.convert SOURCE OUTPUT [options]`` (no Kubeflow needed).

Examples::

    python -m components.convert fashion-mnist out/fmnist --limit-per-split 1000
    python -m components.convert shapes out/shapes
    python -m components.convert ~/photos out/photos --resize 224 224 --verify
    python -m components.convert gs://bucket/labels.csv gs://bucket/datasets/v1 --workers 16
"""

from __future__ import annotations

import argparse
import json
import sys

from components.cli import add_config_flags, flags_to_fields
from components.convert.config import ConvertConfig
from components.image_input.sources import ConvertError, expected, kind_names
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env
from trainer.tfrecords import DatasetInfo


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments, converts, optionally verifies; prints a one-line error on bad input."""
    configure_tensorflow_env()  # --verify reads the shards back with TensorFlow
    p = argparse.ArgumentParser(prog="python -m components.convert", description=__doc__.split("\n")[0])
    p.add_argument("source", help=f"{expected()}; paths local or gs://")
    p.add_argument("output", help="the dataset folder to write (local or gs://)")
    p.add_argument("--config", help="a YAML file with a ConvertConfig section; flags override it")
    p.add_argument("--splits", type=json.loads, help='JSON, e.g. \'{"train": 0.9, "test": 0.1}\'')
    p.add_argument("--gzip", action="store_const", const="GZIP", dest="compression", help="GZIP-compress the shards")
    overrides = {"source_format": {"choices": kind_names()}, "resize": {"metavar": ("HEIGHT", "WIDTH")}}
    # --splits takes JSON and --gzip sets compression, as the README shows them; source is positional.
    exclude, rename = ("source", "splits", "compression"), {"source_format": "--format"}
    add_config_flags(p, ConvertConfig, exclude=exclude, rename=rename, overrides=overrides)
    p.add_argument("--verify", action="store_true", help="read everything back with tf.data")
    args = p.parse_args(argv)
    try:
        config = ConvertConfig.from_yaml(args.config) if args.config else ConvertConfig()
        given = {**flags_to_fields(args), "source": args.source, "splits": args.splits, "compression": args.compression}
        flags = {k: v for k, v in given.items() if v is not None}
        config = config.replace(**flags)
        from components.convert.convert import convert

        manifest = convert(config, args.output)
        if args.verify:
            from components.convert.verify import verify

            report = verify(args.output)
            print(f"verify: {report['records']} records in {report['shards']} shards match dataset.json")
    except (ConvertError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    info = DatasetInfo.from_json(manifest)
    counts = ", ".join(f"{k}={v.count}" for k, v in info.splits.items())
    empty = info.empty_classes
    note = f"; {len(empty)} empty class folders: {', '.join(empty)}" if empty else ""
    boxes = info.boxes
    if boxes is not None:  # detection: what became of the boxes (rejected.jsonl lists the dropped ones)
        note += (
            f"; boxes: {boxes.kept} kept, {boxes.clipped} clipped, {boxes.dropped} dropped, "
            f"{boxes.orphan_annotations} orphan annotations; {boxes.negatives} images without boxes"
        )
    print(f"dataset: {args.output} ({counts}; {info.rejected} rejected{note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
