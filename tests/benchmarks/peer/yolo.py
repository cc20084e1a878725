"""Ultralytics YOLO, the peer: trained for a number of minutes on a COCO set, its detections on an
independent test set written as COCO results.

Run by the peer's own virtualenv (``.venv-peer``: PyTorch and Ultralytics, made by ``make
bench-peer``), never by the project's: nothing here imports TensorFlow or the project. The
benchmark (``tests/benchmarks/test_bench_peer.py``) calls it with the same training and validation
images our detector trains on and scores both sides with the same pycocotools code.

Offline and at its best settings on a CPU: a model YAML (``pretrained=False``), ``amp=False``,
``plots=False``, ``YOLO_OFFLINE=1``, a local font under its config folder (its dataset check would
fetch ``Arial.ttf``), and torch at every core (Ultralytics' CPU default is ``cpu_count - 1``
threads, which cost it a fifth of its epochs here). ``time=`` is in hours and covers its training
loop (its per-epoch validation included); the last validation and our prediction come after it.

    .venv-peer/bin/python tests/benchmarks/peer/yolo.py --coco instances.json --train train.txt
        --val val.txt --test test/instances.json --minutes 5 --out work/
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path


def _setup_offline(config_dir: Path) -> None:
    """Ultralytics' environment for a machine without the internet (set before it is imported)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(YOLO_OFFLINE="1", YOLO_AUTOINSTALL="false", YOLO_CONFIG_DIR=str(config_dir))
    import matplotlib

    font = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):  # any TTF under these names stops the download
        if not (config_dir / name).exists():
            shutil.copyfile(font, config_dir / name)


def _yolo_lines(annotations: list[dict], width: int, height: int, index: dict[int, int]) -> str:
    """An image's non-crowd boxes as YOLO label lines: ``class cx cy w h``, normalised."""
    lines = []
    for a in annotations:
        if a.get("iscrowd"):
            continue
        x, y, w, h = a["bbox"]
        lines.append(f"{index[a['category_id']]} {(x + w / 2) / width:.6f} {(y + h / 2) / height:.6f} "
                     f"{w / width:.6f} {h / height:.6f}")  # fmt: skip
    return "\n".join(lines) + ("\n" if lines else "")


def yolo_layout(coco: Path, splits: dict[str, list[str]], out: Path) -> Path:
    """The COCO set's images of each split (by file name) in Ultralytics' layout; returns data.yaml."""
    data = json.loads(coco.read_text())
    categories = sorted(data["categories"], key=lambda c: c["id"])
    index = {c["id"]: i for i, c in enumerate(categories)}
    boxes: dict[int, list[dict]] = {}
    for a in data["annotations"]:
        boxes.setdefault(a["image_id"], []).append(a)
    by_name = {im["file_name"]: im for im in data["images"]}
    for split, names in splits.items():
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
        (out / "labels" / split).mkdir(parents=True, exist_ok=True)
        for name in names:
            image = by_name[name]
            target = out / "images" / split / Path(name).name
            if not target.exists():
                target.symlink_to((coco.parent / name).resolve())
            label = out / "labels" / split / (Path(name).stem + ".txt")
            label.write_text(_yolo_lines(boxes.get(image["id"], []), image["width"], image["height"], index))
    yaml = out / "data.yaml"
    names = "\n".join(f"  {i}: {c['name']}" for i, c in enumerate(categories))
    yaml.write_text(f"path: {out.resolve()}\ntrain: images/train\nval: images/validation\nnames:\n{names}\n")
    return yaml


def train(args: argparse.Namespace, data_yaml: Path, work: Path) -> tuple[object, dict]:
    """YOLO trained for ``args.minutes``; returns the trained model and what the training spent."""
    import ultralytics.utils.torch_utils as torch_utils
    from ultralytics import YOLO

    torch_utils.NUM_THREADS = args.threads  # select_device sets torch to this many threads on a CPU
    model = YOLO(args.model)
    started = time.perf_counter()
    model.train(
        data=str(data_yaml), time=args.minutes / 60, epochs=args.epochs, optimizer=args.optimizer,
        imgsz=args.imgsz, batch=args.batch,
        device="cpu", workers=0, pretrained=False, amp=False, plots=False, cache=args.cache,
        project=str(work), name="train", exist_ok=True, seed=args.seed, verbose=False,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    trainer = model.trainer
    images = sum(1 for _ in (data_yaml.parent / "images" / "train").iterdir())
    epochs = int(trainer.epoch) + 1
    spent = {"epochs": epochs, "wall_seconds": round(seconds, 1), "train_images": images,
             "images_per_second": round(epochs * images / max(seconds, 1e-9), 1),
             "optimizer": trainer.args.optimizer}  # fmt: skip
    best = Path(trainer.best)
    return YOLO(str(best if best.exists() else trainer.last)), spent


def detections(model: object, test: Path, imgsz: int) -> list[dict]:
    """The model's detections on every image of the test COCO file, as COCO results.

    At Ultralytics' own validation settings (confidence 0.001, NMS IoU 0.7, 100 per image).
    """
    data = json.loads(test.read_text())
    categories = [c["id"] for c in sorted(data["categories"], key=lambda c: c["id"])]
    results = []
    images = data["images"]
    for start in range(0, len(images), 32):
        chunk = images[start : start + 32]
        paths = [str(test.parent / im["file_name"]) for im in chunk]
        found = model.predict(paths, imgsz=imgsz, conf=0.001, iou=0.7, max_det=100, device="cpu", verbose=False)
        for image, r in zip(chunk, found, strict=True):
            for (x0, y0, x1, y1), score, cls in zip(
                r.boxes.xyxy.tolist(), r.boxes.conf.tolist(), r.boxes.cls.tolist(), strict=True
            ):
                results.append({"image_id": image["id"], "category_id": categories[int(cls)],
                                "bbox": [x0, y0, x1 - x0, y1 - y0], "score": score})  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coco", type=Path, required=True, help="the training set's COCO file")
    parser.add_argument("--train", type=Path, required=True, help="file names of the training images, one a line")
    parser.add_argument("--val", type=Path, required=True, help="file names of the validation images")
    parser.add_argument("--test", type=Path, required=True, help="the independent test set's COCO file")
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="yolov8n.yaml")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--cache", default="ram")
    # Ultralytics' defaults, as a user who passes only time= gets them: time= replaces the epochs
    # after the first; 'auto' picks AdamW for this set's length (MuSGD, whose Newton-Schulz steps run
    # in bfloat16, past 10,000 nominal iterations: 30x slower steps on a CPU without bf16 units).
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--optimizer", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _setup_offline(args.out / "config")
    splits = {"train": args.train.read_text().split(), "validation": args.val.read_text().split()}
    data_yaml = yolo_layout(args.coco, splits, args.out / "data")
    model, spent = train(args, data_yaml, args.out / "runs")
    started = time.perf_counter()
    found = detections(model, args.test, args.imgsz)
    spent["predict_seconds"] = round(time.perf_counter() - started, 1)
    (args.out / "detections.json").write_text(json.dumps(found))
    settings = {k: getattr(args, k) for k in ("model", "threads", "imgsz", "batch", "cache", "minutes", "optimizer")}
    (args.out / "spent.json").write_text(json.dumps({**spent, "settings": settings}))
    print(json.dumps(spent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
