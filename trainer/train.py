"""Training: one Keras code path for TPU, GPU and CPU, with checkpoints, resume and export.

``train(dataset_dir, model_dir, config)`` checks everything it can before the first step (the
dataset's manifest and splits, batch sizes against the replicas, the model against the dataset's
image shape and classes, that the model folder is writable), then trains with ``model.fit``
under the accelerator's strategy and writes the model folder of docs/CONTRACTS.md:

    saved_model/  model.keras  config.yaml  model_card.md  checkpoints/  logs/  training.json

``training.json`` is written last: it marks a finished training. A re-run on a finished folder
returns it without training again; a re-run on a half-trained folder (a preempted TPU, a killed
pod) restores the last checkpoint and trains only the remaining steps, to the same final count.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import time
import uuid
from collections.abc import Mapping
from typing import Any

from trainer import data, distribute, tfrecords
from trainer.config import TrainConfig
from trainer.models import ModelError, build_model

log = logging.getLogger(__name__)

SUMMARY_NAME = "training.json"
STATE_NAME = "state.json"
# The learning rate in the config is for this global batch; larger batches scale it linearly.
BASE_BATCH = 128
# A loss this many times the first one seen is treated as diverged.
EXPLODE_FACTOR = 1e4


class TrainingError(RuntimeError):
    """Training cannot start or went wrong; the message says what and how to fix it."""


class TrainingDivergedError(TrainingError):
    """The loss became NaN/inf or exploded; nothing is exported."""


# ---------------------------------------------------------------------------------------------
# Small helpers (no TensorFlow at import time).
# ---------------------------------------------------------------------------------------------


def _join(base: str, *names: str) -> str:
    return "/".join([base.rstrip("/"), *names])


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def _read_json(path: str) -> dict[str, Any] | None:
    gfile = _gfile()
    if not gfile.exists(path):
        return None
    with gfile.GFile(path, "r") as f:
        return json.loads(f.read())


def _write_text(path: str, text: str) -> None:
    # Written under a temporary name and renamed, so a kill never leaves half a file behind.
    gfile = _gfile()
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with gfile.GFile(tmp, "w") as f:
        f.write(text)
    gfile.rename(tmp, path, overwrite=True)


def _step(optimizer: Any) -> int:
    # .numpy() rather than int(): under MirroredStrategy/TPUStrategy the variable is distributed.
    return int(optimizer.iterations.numpy())


def check_writable(model_dir: str) -> None:
    """Creates ``model_dir`` and writes a probe file, so a bad URI fails before training, not after.

    Raises:
        TrainingError: the folder cannot be created or written.
    """
    gfile = _gfile()
    probe = _join(model_dir, f".write-probe-{uuid.uuid4().hex[:8]}")
    try:
        gfile.makedirs(model_dir)
        with gfile.GFile(probe, "w") as f:
            f.write("ok")
        gfile.remove(probe)
    except Exception as err:  # noqa: BLE001 - every filesystem failure means the same thing here
        raise TrainingError(
            f"model_dir: cannot write to {model_dir!r} ({type(err).__name__}: {err}); give a folder or gs:// "
            "URI this process can write (on GKE: the pod's service account needs storage.objectAdmin)"
        ) from err


def resolve_global_batch(config: TrainConfig, replicas: int) -> int:
    """The global batch: ``global_batch_size``, or ``batch_size_per_replica`` x replicas.

    Raises:
        TrainingError: ``global_batch_size`` does not divide evenly by the replicas (refused, not
            adjusted: a silently different batch changes the learning-rate scaling and the results).
    """
    if config.global_batch_size is None:
        return config.batch_size_per_replica * replicas
    if config.global_batch_size % replicas:
        lower = max(replicas, config.global_batch_size // replicas * replicas)
        raise TrainingError(
            f"train.global_batch_size: {config.global_batch_size} does not divide evenly over {replicas} "
            f"replicas; use a multiple of {replicas} (e.g. {lower} or {lower + replicas}), or set "
            "batch_size_per_replica and leave global_batch_size null"
        )
    return config.global_batch_size


def scaled_learning_rate(config: TrainConfig, global_batch: int) -> float:
    """The learning rate scaled linearly from a global batch of 128 (``BASE_BATCH``)."""
    return config.learning_rate * global_batch / BASE_BATCH


# ---------------------------------------------------------------------------------------------
# Callbacks.
# ---------------------------------------------------------------------------------------------


def _callbacks():
    import keras

    class DivergenceGuard(keras.callbacks.Callback):
        """Stops training with an error when the loss is NaN/inf or explodes."""

        def __init__(self) -> None:
            super().__init__()
            self.first: float | None = None

        def _check(self, logs: Mapping[str, Any] | None, where: str) -> None:
            if not logs or "loss" not in logs:
                return
            loss = float(logs["loss"])
            step = _step(self.model.optimizer)
            if not math.isfinite(loss):
                raise TrainingDivergedError(
                    f"the training loss became {loss} at step {step} ({where}); nothing was exported. "
                    "Lower train.learning_rate, check the data (labels in range, images in [0, 1]), or try "
                    "precision: float32"
                )
            if self.first is None:
                self.first = max(loss, 1e-3)
            elif loss > EXPLODE_FACTOR * self.first:
                raise TrainingDivergedError(
                    f"the training loss exploded to {loss:.4g} at step {step} ({where}), from {self.first:.4g} at "
                    "the start; nothing was exported. Lower train.learning_rate"
                )

        def on_train_batch_end(self, batch, logs=None):
            self._check(logs, f"batch {batch}")

        def on_epoch_end(self, epoch, logs=None):
            self._check(logs, f"end of epoch {epoch + 1}")

    class Checkpointer(keras.callbacks.Callback):
        """Saves a checkpoint every N steps and/or seconds."""

        def __init__(self, manager, every_steps: int, every_seconds: float | None) -> None:
            super().__init__()
            self.manager = manager
            self.every_steps = every_steps
            self.every_seconds = every_seconds
            self.last_step = 0
            self.last_time = time.monotonic()

        def save(self, step: int) -> None:
            self.manager.save(checkpoint_number=step)
            self.last_step, self.last_time = step, time.monotonic()
            log.debug("checkpoint at step %d", step)

        def on_train_begin(self, logs=None):
            self.last_step = _step(self.model.optimizer)
            self.last_time = time.monotonic()

        def on_train_batch_end(self, batch, logs=None):
            step = _step(self.model.optimizer)
            due = step - self.last_step >= self.every_steps
            if self.every_seconds is not None:
                due = due or time.monotonic() - self.last_time >= self.every_seconds
            if due and step > self.last_step:
                self.save(step)

    class Throughput(keras.callbacks.Callback):
        """Training images/s the way the GPU-vs-TPU notebook counts: epoch time, first epoch excluded.

        An epoch's time runs from its start to its last training step (validation excluded). The
        first epoch of a process carries the tracing/compilation; it is left out when there are
        later ones. With a single epoch, the time from its first step end (after tracing) to its
        last is used, or the whole epoch if it ran a single execution.
        """

        def __init__(self, global_batch: int) -> None:
            super().__init__()
            self.global_batch = global_batch
            self.epochs: list[tuple[float, int]] = []  # (seconds, steps) per epoch
            self.steady: tuple[float, int] | None = None  # first epoch after its first step end

        def _now(self) -> tuple[float, int]:
            return time.perf_counter(), _step(self.model.optimizer)

        def on_epoch_begin(self, epoch, logs=None):
            self._begin = self._now()
            self._first = self._last = None

        def on_train_batch_end(self, batch, logs=None):
            self._last = self._now()
            if self._first is None:
                self._first = self._last

        def on_epoch_end(self, epoch, logs=None):
            if self._last is None:
                return
            if not self.epochs and self._last[1] > self._first[1]:
                self.steady = (self._last[0] - self._first[0], self._last[1] - self._first[1])
            self.epochs.append((self._last[0] - self._begin[0], self._last[1] - self._begin[1]))

        @property
        def images_per_sec(self) -> float | None:
            timed = self.epochs[1:] or ([self.steady] if self.steady else self.epochs)
            seconds = sum(t for t, _ in timed)
            return sum(n for _, n in timed) * self.global_batch / seconds if seconds > 0 else None

    class ScalarLogger(keras.callbacks.Callback):
        """TensorBoard scalars (losses, metrics, images/s) per epoch, under ``logs/train``.

        Written with TensorFlow's own summary writer and the ``scalars`` plugin tag, so the event
        files open in TensorBoard without the ``tensorboard`` package installed in the training image
        (Keras' TensorBoard callback needs it just to write).
        """

        def __init__(self, log_dir: str, meter: Any) -> None:
            super().__init__()
            import tensorflow as tf
            from tensorflow.core.framework import summary_pb2

            self.tf = tf
            self.writer = tf.summary.create_file_writer(log_dir)
            self.metadata = summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
            )
            self.meter = meter

        def write(self, values: Mapping[str, float], step: int) -> None:
            with self.writer.as_default():
                for tag, value in values.items():
                    self.tf.summary.write(
                        tag, self.tf.constant(float(value), self.tf.float32), step=step, metadata=self.metadata
                    )
            self.writer.flush()

        def on_epoch_end(self, epoch, logs=None):
            values = {f"epoch_{k}": v for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            if self.meter.images_per_sec:
                values["images_per_sec"] = self.meter.images_per_sec
            self.write(values, epoch + 1)

    return DivergenceGuard, Checkpointer, Throughput, ScalarLogger


# ---------------------------------------------------------------------------------------------
# The training run.
# ---------------------------------------------------------------------------------------------


def _check_model(model: Any, image_shape: tuple[int, int, int], num_classes: int, name: str) -> None:
    in_shape = tuple(model.inputs[0].shape[1:])
    out_classes = model.outputs[0].shape[-1]
    if in_shape != tuple(image_shape):
        raise TrainingError(
            f"train.model: {name!r} takes images of shape {in_shape} but the dataset's images are "
            f"{tuple(image_shape)}; build the model for the dataset's shape or convert with resize"
        )
    if out_classes != num_classes:
        raise TrainingError(
            f"train.model: {name!r} outputs {out_classes} classes but the dataset has {num_classes}; "
            "build the model for the dataset's classes"
        )


def _align_steps(
    config: TrainConfig, spe: int, manifest: Mapping[str, Any], global_batch: int, drop_remainder: bool
) -> tuple[int, int]:
    """Steps per epoch and steps per execution that fit each other.

    Keras runs whole executions only (``steps_per_epoch`` 3 with 4 steps per execution trains 4),
    so an epoch must be a multiple of ``steps_per_execution``: a one-pass epoch is rounded down to
    whole executions (the input repeats, so the next epoch reads on where this one stopped), and
    an explicit ``steps_per_epoch`` keeps its count with fewer steps per execution.
    """
    if config.steps_per_epoch is None:
        steps = data.steps_per_epoch(manifest, config.train_split, global_batch, drop_remainder)
        if steps < spe:
            return steps, steps
        return steps - steps % spe, spe
    steps = config.steps_per_epoch
    aligned = math.gcd(spe, steps)
    if aligned != spe and config.steps_per_execution is not None:
        log.warning("steps_per_execution %d does not divide steps_per_epoch %d; using %d", spe, steps, aligned)
    return steps, aligned


def _effective_config(config: TrainConfig, **resolved: Any) -> TrainConfig:
    return config.replace(**{k: v for k, v in resolved.items() if getattr(config, k) is None})


def _dataset_fingerprint(manifest: Mapping[str, Any]) -> str:
    source = manifest.get("source") or {}
    fp = source.get("fingerprint") if isinstance(source, Mapping) else None
    if fp:
        return str(fp)
    import hashlib

    shards = {
        s: [sh.get("crc32c") or sh.get("sha256") or sh.get("file") for sh in v["shards"]]
        for s, v in manifest["splits"].items()
    }
    return hashlib.sha256(json.dumps(shards, sort_keys=True).encode()).hexdigest()[:16]


def train(dataset_dir: str, model_dir: str, config: TrainConfig, checkpoint_dir: str | None = None) -> dict[str, Any]:
    """Trains a model on a TFRecord dataset and writes the model folder.

    Args:
        dataset_dir: the dataset folder (local or gs://) with ``dataset.json``.
        model_dir: the model folder to write (local or gs://); also holds checkpoints for resume.
        config: the training settings.
        checkpoint_dir: where checkpoints go; ``None`` for ``<model_dir>/checkpoints``. On a cluster
            KFP hands a component a *local* path that it uploads only when the step ends, so the
            component passes a folder under the artifact's gs:// URI here: checkpoints then
            survive a preempted pod, and the retried one (same URI) resumes from them.

    Returns:
        The training summary written to ``training.json``: steps, epochs, global_batch_size,
        accelerator, strategy, precision, images_per_sec, final train/validation loss and
        accuracy, class_names, image_shape, config and dataset fingerprints, and the history.

    Raises:
        tfrecords.DatasetError: no/bad ``dataset.json``, a missing or empty split, images of mixed size.
        TrainingError: an unwritable ``model_dir``, a batch the replicas cannot divide, a model
            that does not fit the dataset, or a folder holding a different training.
        TrainingDivergedError: the loss became NaN/inf or exploded.
        distribute.AcceleratorNotFoundError: an accelerator asked for is not there.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    dataset_dir, model_dir = str(dataset_dir), str(model_dir)

    # --- everything that can be checked before TensorFlow builds anything ---------------------
    manifest = tfrecords.load_manifest(dataset_dir)
    image_shape = data.image_shape_of(manifest)
    class_names = list(manifest["classes"])
    train_count = data.split_count(manifest, config.train_split)
    val_split = config.validation_split
    if val_split is not None and val_split not in manifest["splits"]:
        log.warning(
            "validation split %r is not in the dataset (%s); training without validation",
            val_split,
            sorted(manifest["splits"]),
        )
        val_split = None
    if val_split is not None:
        data.split_count(manifest, val_split)
    check_writable(model_dir)

    fingerprint = config.fingerprint()
    dataset_fp = _dataset_fingerprint(manifest)
    finished = _read_json(_join(model_dir, SUMMARY_NAME))
    if finished is not None:
        if finished.get("config_fingerprint") == fingerprint and finished.get("dataset_fingerprint") == dataset_fp:
            log.info(
                "%s already holds a finished training (step %s); not training again", model_dir, finished.get("steps")
            )
            return finished
        raise TrainingError(
            f"model_dir: {model_dir} already holds a model trained with another config or dataset "
            f"(config {finished.get('config_fingerprint')} vs {fingerprint}, dataset "
            f"{finished.get('dataset_fingerprint')} vs {dataset_fp}); train into a new folder"
        )
    ckpt_dir = checkpoint_dir or _join(model_dir, "checkpoints")
    if checkpoint_dir is not None:
        check_writable(checkpoint_dir)
    state = _read_json(_join(ckpt_dir, STATE_NAME))
    if state is not None and (state.get("config_fingerprint"), state.get("dataset_fingerprint")) != (
        fingerprint,
        dataset_fp,
    ):
        raise TrainingError(
            f"model_dir: {ckpt_dir} holds checkpoints of another config or dataset; resuming from them "
            "would mix two trainings. Train into a new folder (or delete the checkpoints)"
        )

    import keras
    import tensorflow as tf

    strategy = distribute.get_strategy(config.accelerator)
    kind = distribute.accelerator_kind(strategy)
    defaults = distribute.DEFAULTS[kind]
    replicas = strategy.num_replicas_in_sync
    global_batch = resolve_global_batch(config, replicas)
    precision = config.precision or defaults.precision
    spe = config.steps_per_execution or defaults.steps_per_execution
    if spe > 1 and isinstance(strategy, tf.distribute.MirroredStrategy):
        # Keras 3 fails under MirroredStrategy with several steps per execution ("You must feed a
        # value for placeholder tensor", keras-team/keras#19246, reproduced here with 2 replicas).
        log.warning("steps_per_execution %d is not supported by Keras under MirroredStrategy; using 1", spe)
        spe = 1
    jit = defaults.jit_compile if config.jit_compile is None else config.jit_compile
    drop_remainder = defaults.drop_remainder
    steps_per_epoch, spe = _align_steps(config, spe, manifest, global_batch, drop_remainder)
    if global_batch > train_count:
        log.warning(
            "the global batch (%d) is larger than the %r split (%d examples)",
            global_batch,
            config.train_split,
            train_count,
        )
    total_steps = config.epochs * steps_per_epoch
    lr = scaled_learning_rate(config, global_batch)
    effective = _effective_config(config, precision=precision, steps_per_execution=spe, jit_compile=jit)
    log.info(
        "training %s on %s (%s, %d replicas): global batch %d, lr %.3g, %s, steps_per_execution %d, "
        "jit %s, %d epochs x %d steps",
        config.model,
        kind,
        type(strategy).__name__,
        replicas,
        global_batch,
        lr,
        precision,
        spe,
        jit,
        config.epochs,
        steps_per_epoch,
    )

    keras.utils.set_random_seed(config.seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        with strategy.scope():
            try:
                model = build_model(config.model, image_shape, len(class_names), **dict(config.model_options))
            except ModelError as err:
                raise TrainingError(f"train.model: {err}") from err
            _check_model(model, image_shape, len(class_names), config.model)
            optimizer = keras.optimizers.Adam(learning_rate=lr)
            model.compile(
                optimizer=optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(),
                metrics=["accuracy"],
                steps_per_execution=spe,
                jit_compile=jit,
            )
            # Under mixed_float16 Keras wraps the optimizer in a LossScaleOptimizer: use the
            # wrapper, whose step count includes the steps it skipped on overflow.
            optimizer = model.optimizer
            optimizer.build(model.trainable_variables)
            checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)

    manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=3)
    history: list[dict[str, Any]] = (state or {}).get("history", [])
    resumed_from = 0
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        resumed_from = _step(optimizer)
        log.info("resuming from %s at step %d of %d", manager.latest_checkpoint, resumed_from, total_steps)
    # Keep only the epochs the restored weights have actually finished.
    history = [h for h in history if h["epoch"] * steps_per_epoch <= resumed_from]

    def write_state() -> None:
        _write_text(
            _join(ckpt_dir, STATE_NAME),
            json.dumps(
                {"config_fingerprint": fingerprint, "dataset_fingerprint": dataset_fp, "history": history},
                indent=1,
            ),
        )

    _gfile().makedirs(ckpt_dir)
    write_state()
    cache = 0 < data.cached_size_mb(manifest, config.train_split) <= config.cache_max_mb
    train_ds = data.make_dataset(
        dataset_dir,
        config.train_split,
        global_batch,
        training=True,
        drop_remainder=drop_remainder,
        shuffle_buffer=config.shuffle_buffer,
        augment=config.augment,
        seed=config.seed,
        cache=cache,
        manifest=manifest,
    )
    val_ds = None
    val_steps = config.validation_steps
    if val_split is not None:
        val_ds = data.make_dataset(
            dataset_dir,
            val_split,
            global_batch,
            training=False,
            drop_remainder=drop_remainder,
            manifest=manifest,
        )
        val_count = data.split_count(manifest, val_split)
        full = val_count // global_batch if drop_remainder else math.ceil(val_count / global_batch)
        # A bounded count: Keras then neither warns about running out of data nor reads past the end.
        val_steps = min(val_steps or full, full)
        if val_steps < 1:
            log.warning("validation split %r is smaller than one global batch; no validation", val_split)
            val_ds, val_steps = None, None

    guard_cls, ckpt_cls, meter_cls, scalars_cls = _callbacks()
    saver = ckpt_cls(manager, config.checkpoint_every_steps, config.checkpoint_every_seconds)
    meter = meter_cls(global_batch)
    callbacks = [guard_cls(), saver, meter, scalars_cls(_join(model_dir, "logs", "train"), meter)]

    step = resumed_from
    started = time.perf_counter()
    for epoch in range(step // steps_per_epoch, config.epochs):
        remaining = (epoch + 1) * steps_per_epoch - step
        if remaining <= 0:
            continue
        if remaining % spe:
            # Keras runs whole executions only; checkpoints of this config always fall on them.
            raise TrainingError(
                f"the checkpoint at step {step} is not on a multiple of steps_per_execution ({spe}); it was "
                "written with other settings. Train into a new folder (or delete the checkpoints)"
            )
        fit = model.fit(
            train_ds,
            initial_epoch=epoch,
            epochs=epoch + 1,
            steps_per_epoch=remaining,
            validation_data=val_ds,
            validation_steps=val_steps,
            callbacks=callbacks,
            shuffle=False,  # the tf.data pipeline shuffles
            verbose=2,
        )
        step = _step(optimizer)
        saver.save(step)
        row = {"epoch": epoch + 1, "step": step}
        row.update({k: float(v[-1]) for k, v in fit.history.items()})
        history.append(row)
        write_state()
    train_seconds = time.perf_counter() - started
    if step != total_steps:
        raise TrainingError(f"training ended at step {step}, expected {total_steps}; re-run to resume")

    last = history[-1] if history else {}
    summary: dict[str, Any] = {
        "model": config.model,
        "steps": step,
        "epochs": config.epochs,
        "steps_per_epoch": steps_per_epoch,
        "global_batch_size": global_batch,
        "batch_size_per_replica": global_batch // replicas,
        "replicas": replicas,
        "accelerator": kind,
        "strategy": type(strategy).__name__,
        "precision": precision,
        "steps_per_execution": spe,
        "jit_compile": bool(jit),
        "input_cached": cache,
        "learning_rate": lr,
        "images_per_sec": meter.images_per_sec,
        "train_seconds": train_seconds,
        "resumed_from_step": resumed_from,
        "train_loss": last.get("loss"),
        "train_accuracy": last.get("accuracy"),
        "val_loss": last.get("val_loss"),
        "val_accuracy": last.get("val_accuracy"),
        "class_names": class_names,
        "image_shape": list(image_shape),
        "dataset": dataset_dir,
        "dataset_fingerprint": dataset_fp,
        "config_fingerprint": fingerprint,
        "history": history,
        "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    _export(model, model_dir, effective, summary, manifest)
    return summary


def _export(model: Any, model_dir: str, effective: TrainConfig, summary: dict[str, Any], manifest: Mapping) -> None:
    from trainer.export import export_saved_model

    gfile = _gfile()
    saved = _join(model_dir, "saved_model")
    if gfile.exists(saved):
        # A previous run died during export (training.json is written last): start it over.
        gfile.rmtree(saved)
    export_saved_model(model, saved, summary["class_names"], tuple(summary["image_shape"]))
    keras_path = _join(model_dir, "model.keras")
    model.save(keras_path)
    _write_text(_join(model_dir, "config.yaml"), effective.to_yaml())
    _write_text(_join(model_dir, "model_card.md"), model_card(summary, manifest))
    _write_text(_join(model_dir, SUMMARY_NAME), json.dumps(summary, indent=1))


def _fmt(value: Any, spec: str = ".4f") -> str:
    return "n/a" if value is None else format(value, spec)


def model_card(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> str:
    """A short Markdown model card: dataset, accelerator, steps, final metrics."""
    source = manifest.get("source") or {}
    counts = {s: v.get("count") for s, v in manifest["splits"].items()}
    classes = summary["class_names"]
    lines = [
        f"# Model card: {summary['model']}",
        "",
        "## Dataset",
        f"- location: `{summary['dataset']}` (source `{source.get('uri', 'n/a')}`, fingerprint "
        f"`{summary['dataset_fingerprint']}`)",
        f"- examples per split: {', '.join(f'{k} {v}' for k, v in counts.items())}",
        f"- images: {'x'.join(str(v) for v in summary['image_shape'])}; {len(classes)} classes: "
        f"{', '.join(classes[:20])}{' ...' if len(classes) > 20 else ''}",
        "",
        "## Training",
        f"- accelerator: {summary['accelerator']} ({summary['strategy']}, {summary['replicas']} replicas), "
        f"precision {summary['precision']}, XLA {summary['jit_compile']}",
        f"- {summary['steps']} steps = {summary['epochs']} epochs x {summary['steps_per_epoch']} steps, global "
        f"batch {summary['global_batch_size']}, learning rate {summary['learning_rate']:.4g}",
        f"- throughput: {_fmt(summary['images_per_sec'], '.0f')} images/s; config `{summary['config_fingerprint']}`",
        "",
        "## Final metrics",
        "| | loss | accuracy |",
        "|---|---|---|",
        f"| train | {_fmt(summary['train_loss'])} | {_fmt(summary['train_accuracy'])} |",
        f"| validation | {_fmt(summary['val_loss'])} | {_fmt(summary['val_accuracy'])} |",
        "",
        "## Serving",
        "`saved_model/` signatures: `serving_default` (encoded image bytes in) and `serving_tensors` "
        "(float32 images in [0, 1]); both return `probabilities` and `classes`.",
        "",
    ]
    return "\n".join(lines)
