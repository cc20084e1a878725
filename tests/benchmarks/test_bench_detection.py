"""Detection speed and quality (``make bench``), each measured against a baseline in the same run.

1. The input pipeline alone (read, parse, decode, letterbox, pad: every epoch, no cache) against
   what training consumes: target >= 3x; with the in-memory cache: target >= 20x.
2. Training throughput: the trainer against the straightforward way a keras-hub user writes it
   (a per-example tf.data map that parses, decodes, resizes and pads boxes, then batches; ``fit``
   with keras-hub's defaults), same model, data, image size, batch and oneDNN, ours at the precision
   ``train()`` chooses on this CPU: target >= 1.3x on a CPU with bf16 units.
3. Inference: the case study's 3,200 images in batches of 64, in-process and over REST, and
   per-class NMS in one batched op (what the export uses) against keras-hub's NMS per image
   through ``map_fn`` (the way around its static batch).
4. Quality: the ``make run TASK=detection`` recipe (built-in shapes, the pipeline's defaults) over
   three seeds: test AP@0.5 and AP@[.5:.95] and the training time of each.

The sides alternate over rounds and the medians are printed: this machine is noisy.
Knobs: ``LTP_BENCH_ROUNDS`` (3), ``LTP_BENCH_SEEDS`` (3, at least 1), ``LTP_BENCH_PRECISION`` (the
plain-fit comparison with ours at one precision, e.g. ``float32``: the step alone).
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

pytestmark = pytest.mark.benchmark

ROUNDS = int(os.environ.get("LTP_BENCH_ROUNDS", "3"))
SEEDS = max(1, int(os.environ.get("LTP_BENCH_SEEDS", "3")))
BATCH = 16


@pytest.fixture(scope="module")
def shapes_dataset(tmp_path_factory):
    from components.convert import convert
    from components.convert.config import ConvertConfig

    out = tmp_path_factory.mktemp("bench-det") / "ds"
    convert(ConvertConfig(source="shapes", workers=2), str(out))
    return str(out)


def _images_per_sec(ds, batches: int) -> float:
    iterator = iter(ds)
    next(iterator)  # the first batch builds the pipeline
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * BATCH / (time.perf_counter() - start)


def _straightforward_input(dataset_dir: str, size: int, max_boxes: int):
    """A keras-hub user's input: one record at a time through parse, decode, resize, pad."""
    import tensorflow as tf

    from trainer import tfrecords

    files = tfrecords.load_dataset_info(dataset_dir).shard_paths("train")
    spec = {k: tfrecords.FEATURE_SPEC[k] for k in ("image/encoded", "image/object/class/label")}
    spec.update(
        {
            f"image/object/bbox/{c}": tfrecords.FEATURE_SPEC[f"image/object/bbox/{c}"]
            for c in "ymin xmin ymax xmax".split()
        }
    )

    def one(serialized):
        f = tf.io.parse_single_example(serialized, spec)
        image = tf.image.resize(tf.io.decode_png(f["image/encoded"], channels=3), (size, size)) / 255.0
        boxes = tf.stack([f[f"image/object/bbox/{c}"] for c in ("ymin", "xmin", "ymax", "xmax")], axis=-1) * size
        labels = tf.cast(f["image/object/class/label"], tf.float32)
        pad = max_boxes - tf.shape(labels)[0]
        return image, {
            "boxes": tf.pad(boxes, [[0, pad], [0, 0]], constant_values=-1.0),
            "labels": tf.pad(labels, [[0, pad]], constant_values=-1.0),
        }

    ds = tf.data.TFRecordDataset(files).repeat().shuffle(2048).map(one, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def _recipe_task(dataset_dir: str):
    """The detection task fitted to the shapes as ``make run TASK=detection`` fits it (size, anchors, boxes)."""
    from trainer.tasks import get_task
    from trainer.tfrecords import load_dataset_info

    info = load_dataset_info(dataset_dir)
    fitted = get_task("detection").fit_to_data(
        info, "train", global_batch=BATCH, steps_per_epoch=100, epochs=1, learning_rate=1e-3
    )
    return fitted.task


def test_input_pipeline_against_what_training_consumes(shapes_dataset, tmp_path):
    from trainer import data
    from trainer.config import TrainConfig
    from trainer.train import train

    config = TrainConfig(
        model="retinanet", epochs=2, steps_per_epoch=60, batch_size_per_replica=BATCH, learning_rate=0.008
    )
    consumed = train(shapes_dataset, str(tmp_path / "m"), config).images_per_sec
    streamed, cached = [], []
    for _ in range(ROUNDS):
        kwargs = {"training": True, "drop_remainder": True, "task": _recipe_task(shapes_dataset)}
        streamed.append(_images_per_sec(data.make_dataset(shapes_dataset, "train", BATCH, cache=False, **kwargs), 150))
        warm = data.make_dataset(shapes_dataset, "train", BATCH, cache=True, **kwargs)
        it = iter(warm)
        for _ in range(200):  # one pass fills the cache
            next(it)
        start = time.perf_counter()
        for _ in range(300):
            next(it)
        cached.append(300 * BATCH / (time.perf_counter() - start))
    s, c = statistics.median(streamed), statistics.median(cached)
    print(
        f"\n[detection input] training consumes {consumed:,.0f} img/s; streamed input {s:,.0f} img/s "
        f"= {s / consumed:.1f}x (target 3x); cached {c:,.0f} img/s = {c / consumed:.1f}x (target 20x)"
    )
    assert s > 0 and c > 0


def test_training_against_the_straightforward_keras_hub_way(shapes_dataset, tmp_path):
    """Ours at the precision its calibration would keep (each candidate timed, the faster kept, as
    ``trainer.budget.calibrate`` does) against keras-hub's plain ``compile()``/``fit`` at its float32."""
    import keras

    from trainer import data
    from trainer.budget import calibrate
    from trainer.distribute import choose_precision, precision_candidates
    from trainer.tasks.detection.model import build_detector

    task = _recipe_task(shapes_dataset)
    opts = task.options
    rule = choose_precision("auto", "cpu")
    # LTP_BENCH_PRECISION=float32: ours at the plain side's precision (the step alone compared)
    forced = os.environ.get("LTP_BENCH_PRECISION")
    candidates = (forced,) if forced else precision_candidates("auto", rule, "cpu")
    rates: dict[str, list[float]] = {name: [] for name in (*candidates, "plain")}
    for r in range(ROUNDS):
        order = list(rates) if r % 2 == 0 else list(reversed(rates))
        for side in order:
            keras.mixed_precision.set_global_policy("float32" if side == "plain" else side)
            try:
                model = build_detector(opts, 3)
                if side != "plain":
                    task.compile(model, task.optimizer(1e-3, 300), steps_per_execution=4, jit_compile=False)
                    ds = data.make_dataset(
                        shapes_dataset, "train", BATCH, training=True, drop_remainder=True, cache=True, task=task
                    )
                else:
                    model.compile()  # keras-hub's defaults
                    ds = _straightforward_input(shapes_dataset, opts.image_size, opts.max_boxes)
                model.fit(ds, steps_per_epoch=20, epochs=1, verbose=0)  # compile and warm up
                start = time.perf_counter()
                model.fit(ds, steps_per_epoch=80, epochs=1, verbose=0)
            finally:
                keras.mixed_precision.set_global_policy("float32")
            rates[side].append(80 * BATCH / (time.perf_counter() - start))
    median = {side: statistics.median(r) for side, r in rates.items()}
    kept = calibrate.choose({p: 1 / median[p] for p in candidates})
    ours, plain = median[kept], median["plain"]
    measured = ", ".join(f"{p} {median[p]:,.1f}" for p in candidates)
    print(
        f"\n[detection training] the make run recipe ({opts.image_size} px, batch {BATCH}, P{opts.min_level}-"
        f"P{opts.max_level}): ours at {kept} (measured: {measured} img/s; the rule alone: {rule.policy}) "
        f"{ours:,.1f} img/s vs straightforward at float32 {plain:,.1f} img/s = {ours / plain:.2f}x (target 1.0x); "
        f"precision by measurement vs float32: {ours / median.get('float32', ours):.2f}x"
    )
    assert ours > 0 and plain > 0


def test_inference_in_process_served_and_the_nms_ways(shapes_dataset, tmp_path):
    import keras_hub
    import tensorflow as tf

    from components.benchmark.config import BenchmarkConfig
    from components.benchmark.run import run_benchmark
    from trainer.benchmark import benchmark_signature
    from trainer.config import TrainConfig
    from trainer.evaluate import read_encoded_split
    from trainer.train import train

    model_dir = str(tmp_path / "m")
    train(
        shapes_dataset,
        model_dir,
        TrainConfig(model="retinanet", epochs=1, steps_per_epoch=20, batch_size_per_replica=BATCH),
    )
    row = run_benchmark(model_dir, shapes_dataset, BenchmarkConfig(num_images=3200, batch_size=64, rounds=ROUNDS))
    print(
        f"\n[detection inference] 3,200 images in batches of 64: in-process {row.timing.images_per_sec:,.1f} img/s "
        f"(p50 {row.timing.latency_p50_ms:.0f} ms, p99 {row.timing.latency_p99_ms:.0f} ms), REST on the "
        f"{row.http_server} {row.http.images_per_sec:,.1f} img/s (p50 {row.http.latency_p50_ms:.0f} ms); "
        f"REST time / in-process {row.http_overhead:.2f}x (target <= 1.25x); "
        f"{row.images_per_dollar or 0:,.0f} images/$ at the cpu-8 price"
    )
    # keras-hub's NMS needs a static batch: run it per image under map_fn, after the batched model.
    import keras

    model = keras.saving.load_model(os.path.join(model_dir, "model.keras"))
    nms = keras_hub.layers.NonMaxSuppression("yxyx", from_logits=True, confidence_threshold=0.05, max_detections=100)
    anchors = tf.concat(list(model.anchor_generator(tf.zeros([1, 64, 64, 3])).values()), axis=0)

    @tf.function(input_signature=[tf.TensorSpec([None, 64, 64, 3], tf.float32)])
    def per_image(images):
        raw = model(images, training=False)
        boxes = keras.utils.bounding_boxes.decode_deltas_to_boxes(
            anchors=anchors, boxes_delta=raw["bbox_regression"], anchor_format="yxyx", box_format="yxyx",
            encoded_format="center_xywh", image_shape=(64, 64, 3),
        )  # fmt: skip

        def one(args):
            b, s = args
            out = nms(b[None], s[None], images=tf.zeros([1, 64, 64, 3]))
            return out["boxes"][0], out["confidence"][0]

        return dict(zip(("boxes", "scores"), tf.map_fn(one, (boxes, raw["cls_logits"]), fn_output_signature=(
            tf.TensorSpec([100, 4], tf.float32), tf.TensorSpec([100], tf.float32))), strict=True))  # fmt: skip

    loaded = tf.saved_model.load(os.path.join(model_dir, "saved_model"))
    batched = loaded.signatures["serving_tensors"]
    encoded, _, _ = read_encoded_split(shapes_dataset, "test", 640)
    arrays = [tf.image.convert_image_dtype(tf.io.decode_png(e, channels=3), tf.float32).numpy() for e in encoded]
    ours = benchmark_signature(batched, arrays, "images", 640, 64, 2, ROUNDS)
    theirs = benchmark_signature(per_image, arrays, "images", 640, 64, 2, ROUNDS)
    print(
        f"[detection NMS] batched per-class combined NMS {ours.images_per_sec:,.1f} img/s vs keras-hub NMS per image "
        f"(map_fn) {theirs.images_per_sec:,.1f} img/s = {ours.images_per_sec / theirs.images_per_sec:.2f}x"
    )


def test_the_make_run_recipe_over_seeds(shapes_dataset, tmp_path):
    import inspect

    from pipelines import detection
    from trainer.config import EvaluateConfig, TrainConfig
    from trainer.tasks import get_task
    from trainer.train import train

    defaults = {k: v.default for k, v in inspect.signature(detection.pipeline.pipeline_func).parameters.items()}
    rows = []
    for seed in range(SEEDS):
        config = TrainConfig(
            model="retinanet",
            epochs=defaults["epochs"] or None,  # 0: the schedule fitted to the data
            model_options=dict(defaults["model_options"]),
            batch_size_per_replica=defaults["batch_size_per_replica"],
            learning_rate=defaults["learning_rate"],
            augment=defaults["augment"],
            seed=seed,
        )
        summary = train(shapes_dataset, str(tmp_path / f"seed{seed}"), config)
        metrics = (
            get_task("detection")
            .evaluate(str(tmp_path / f"seed{seed}" / "saved_model"), shapes_dataset, EvaluateConfig())
            .metrics
        )
        rows.append((seed, summary.train_seconds, summary.images_per_sec, metrics["ap50"], metrics["ap"]))
        print(
            f"\n[detection quality] seed {seed}: {summary.train_seconds:.0f} s of training "
            f"({summary.images_per_sec:,.0f} img/s), test AP@0.5 {metrics['ap50']:.3f}, AP {metrics['ap']:.3f}"
        )
    print(
        f"[detection quality] over {len(rows)} seeds: AP@0.5 min {min(r[3] for r in rows):.3f} (target 0.9), "
        f"AP min {min(r[4] for r in rows):.3f} (target 0.5), "
        f"training {statistics.median(r[1] for r in rows):.0f} s median"
    )
