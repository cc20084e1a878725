"""Setting a training up for its strategy: batch, precision and steps; the fit to the data; the
model, its inputs and callbacks; the checkpoint it resumes from.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Optional

from trainer import data, distribute, model_folder, storage
from trainer.config import TrainConfig
from trainer.errors import TrainingError
from trainer.tasks import TaskError
from trainer.tfrecords import DatasetInfo
from trainer.training.run import Fit, Run, Settings, gfile, write_state

log = logging.getLogger(__name__)

# The learning rate in the config is for this global batch; larger batches scale it linearly.
# The learning rate in the config is for this global batch; larger batches scale it linearly.
BASE_BATCH = 128


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


def _align_steps(
    config: TrainConfig, spe: int, info: DatasetInfo, global_batch: int, drop_remainder: bool
) -> tuple[int, int]:
    """Steps per epoch and steps per execution that fit each other.

    Keras runs whole executions only (``steps_per_epoch`` 3 with 4 steps per execution trains 4),
    so an epoch must be a multiple of ``steps_per_execution``: a one-pass epoch is rounded down to
    whole executions (the input repeats, so the next epoch reads on where this one stopped), and
    an explicit ``steps_per_epoch`` keeps its count with fewer steps per execution.
    """
    if config.steps_per_epoch is None:
        steps = data.steps_per_epoch(info, config.train_split, global_batch, drop_remainder)
        if steps < spe:
            return steps, steps
        return steps - steps % spe, spe
    steps = config.steps_per_epoch
    aligned = math.gcd(spe, steps)
    if aligned != spe and config.steps_per_execution is not None:
        log.warning("steps_per_execution %d does not divide steps_per_epoch %d; using %d", spe, steps, aligned)
    return steps, aligned


def _precision(config: TrainConfig, kind: str) -> distribute.PrecisionChoice:
    """The mixed-precision policy: the config's, or the one that suits the device (``auto``)."""
    capability = distribute.gpu_capability() if kind == "gpu" else None
    choice = distribute.choose_precision(config.precision, kind, gpu_capability=capability)
    log.info("precision %s: %s", choice.policy, choice.reason)
    return choice


def resolve_settings(config: TrainConfig, info: DatasetInfo, strategy: Any) -> Settings:
    """Batch, precision, steps per execution, XLA and steps per epoch for the strategy."""
    import tensorflow as tf

    kind = distribute.accelerator_kind(strategy)
    precision = _precision(config, kind)
    defaults = distribute.DEFAULTS[kind]
    replicas = strategy.num_replicas_in_sync
    global_batch = resolve_global_batch(config, replicas)
    spe = config.steps_per_execution or defaults.steps_per_execution
    mirrored = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    if spe > 1 and isinstance(strategy, mirrored):
        # Keras 3 fails under MirroredStrategy with several steps per execution ("You must feed a
        # value for placeholder tensor", keras-team/keras#19246, reproduced here with 2 replicas),
        # and so does it under MultiWorkerMirroredStrategy, which is not its subclass.
        log.warning(
            "steps_per_execution %d is not supported by Keras under %s; using 1",
            spe,
            distribute.strategy_name(strategy),
        )
        spe = 1
    steps_per_epoch, spe = _align_steps(config, spe, info, global_batch, defaults.drop_remainder)
    train_count = info.split_count(config.train_split)
    if global_batch > train_count:
        log.warning(
            "the global batch (%d) is larger than the %r split (%d examples)",
            global_batch,
            config.train_split,
            train_count,
        )
    settings = Settings(
        kind=kind,
        replicas=replicas,
        global_batch=global_batch,
        precision=precision.policy,
        precision_reason=precision.reason,
        steps_per_execution=spe,
        jit_compile=defaults.jit_compile if config.jit_compile is None else config.jit_compile,
        drop_remainder=defaults.drop_remainder,
        steps_per_epoch=steps_per_epoch,
        learning_rate=scaled_learning_rate(config, global_batch),
        workers=config.workers,
        # Several workers would each time and choose alone: they keep the rule's policy.
        precision_candidates=distribute.precision_candidates(config.precision, precision, kind, config.workers),
        epochs=config.epochs or 0,  # None: fitted to the data (fit_to_data)
    )
    log.info(
        "training %s on %s (%s, %d replicas): global batch %d, lr %.3g, %s, steps_per_execution %d, "
        "jit %s, %s epochs x %d steps",
        config.model,
        kind,
        distribute.strategy_name(strategy),
        replicas,
        global_batch,
        settings.learning_rate,
        settings.precision,
        spe,
        settings.jit_compile,
        config.epochs or "fitted",
        steps_per_epoch,
    )
    return settings


def fit_to_data(run: Run) -> Run:
    """The run with its task's ``auto`` options fitted to the training split, and the fitted epochs.

    Raises:
        TrainingError: the data cannot be fitted, or ``epochs`` is null for a task that fits no schedule.
    """
    prepared, config, settings = run.prepared, run.config, run.settings
    try:
        fitted = prepared.task.fit_to_data(
            prepared.info,
            config.train_split,
            global_batch=settings.global_batch,
            steps_per_epoch=settings.steps_per_epoch,
            epochs=config.epochs,
            learning_rate=settings.learning_rate,
        )
    except TaskError as err:
        raise TrainingError(str(err)) from err
    epochs = config.epochs or (fitted.epochs if fitted is not None else None)
    if epochs is None and config.limits.budgeted:
        epochs = 1  # laid out by the budget once the step is timed (lay_out_budget)
    if epochs is None:
        raise TrainingError(
            f"train.epochs: null (fitted to the data) but the {prepared.task.name} task fits no schedule; set epochs"
        )
    if fitted is None:
        return dataclasses.replace(run, settings=dataclasses.replace(settings, epochs=epochs))
    return dataclasses.replace(
        run,
        prepared=dataclasses.replace(prepared, task=fitted.task, fit=fitted.record),
        settings=dataclasses.replace(settings, epochs=epochs),
    )


def warm_start_file(where: str) -> str:
    """The weights file a ``warm_start`` names: a model folder's ``model.keras``, or the file itself."""
    from trainer import model_folder, storage

    if where.endswith((".keras", ".weights.h5")):
        return where
    return storage.join(where, model_folder.KERAS_MODEL)


def warm_start(model: Any, where: str) -> None:
    """Loads the weights of an earlier training into ``model`` (``TrainConfig.warm_start``).

    Raises:
        TrainingError: the file is not there, or its weights do not fit the model (one line each).
    """
    from trainer import storage

    path = warm_start_file(where)
    if not storage.exists(path):
        raise TrainingError(
            f"train.warm_start: no {path}; give a model folder of an earlier training (model.keras inside) "
            "or a .keras / .weights.h5 file, or leave warm_start empty"
        )
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        local = path
        if storage.is_gcs(path):  # Keras reads local files
            local = os.path.join(tmp, os.path.basename(path))
            storage.copy_file(path, local)
        try:
            model.load_weights(local)
        except (ValueError, KeyError) as err:
            why = " ".join(str(err).split())[:300]
            raise TrainingError(
                f"train.warm_start: {path} does not fit this model ({why}); start from a training of the same "
                "model, options and classes, or leave warm_start empty"
            ) from None
    log.info("warm start: the model starts from %s", path)


def build(run: Run) -> tuple[Any, Any, Any]:
    """The task's model, compiled, with its optimizer and a checkpoint of both, under the strategy."""
    import keras
    import tensorflow as tf

    prepared, settings = run.prepared, run.settings
    keras.utils.set_random_seed(run.config.seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(settings.precision)
    try:
        with run.strategy.scope():
            try:
                model = prepared.task.build_model(prepared.model, prepared.info)
            except TaskError as err:
                raise TrainingError(str(err)) from err
            if run.config.warm_start:
                warm_start(model, run.config.warm_start)
            prepared.task.compile(
                model,
                prepared.task.optimizer(settings.learning_rate, run.total_steps),
                steps_per_execution=settings.steps_per_execution,
                jit_compile=settings.jit_compile,
            )
            # Under mixed_float16 Keras wraps the optimizer in a LossScaleOptimizer: use the
            # wrapper, whose step count includes the steps it skipped on overflow.
            optimizer = model.optimizer
            optimizer.build(model.trainable_variables)
            checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    return model, optimizer, checkpoint


def _inputs(run: Run) -> tuple[Any, Any, Optional[int], bool]:
    """The training input, the validation input (or None) with its step count, and whether it caches."""
    dataset_dir, config, prepared, settings = run.dataset_dir, run.config, run.prepared, run.settings
    info, task = prepared.info, prepared.task
    shape = task.input_shape(info)
    cache = 0 < data.cached_size_mb(info, config.train_split, shape) <= config.cache_max_mb
    train_ds = data.make_dataset(
        dataset_dir,
        config.train_split,
        settings.global_batch,
        training=True,
        drop_remainder=settings.drop_remainder,
        shuffle_buffer=config.shuffle_buffer,
        augment=config.augment,
        seed=config.seed,
        cache=cache,
        info=info,
        task=task,
    )
    if prepared.val_split is None:
        return train_ds, None, config.validation_steps, cache
    val_ds = data.make_dataset(
        dataset_dir,
        prepared.val_split,
        settings.global_batch,
        training=False,
        drop_remainder=settings.drop_remainder,
        info=info,
        task=task,
    )
    val_count = info.split_count(prepared.val_split)
    batch = settings.global_batch
    # Several workers split a short last batch unevenly, and a replica with no example would
    # score nothing as NaN: they validate on whole batches.
    whole_batches = settings.drop_remainder or settings.workers > 1
    full = val_count // batch if whole_batches else math.ceil(val_count / batch)
    # A bounded count: Keras then neither warns about running out of data nor reads past the end.
    val_steps = min(config.validation_steps or full, full)
    if val_steps < 1:
        log.warning("validation split %r is smaller than one global batch; no validation", prepared.val_split)
        return train_ds, None, None, cache
    return train_ds, val_ds, val_steps, cache


def start(run: Run, built: tuple[Any, Any, Any]) -> Fit:
    """Restores the checkpoint, writes the state, makes the inputs and callbacks.

    Checkpoints are restored from ``prepared.ckpt_dir`` (the chief's) and saved into the folder
    of the run's ``out_dir`` (the chief's own, or a worker's scratch folder).

    Args:
        run: the training.
        built: the model, its optimizer and their checkpoint (:func:`build`).

    Returns:
        What the epochs fit with, from the step resumed from, with the history of the epochs the
        restored weights finished.
    """
    import tensorflow as tf

    from trainer import callbacks

    model, optimizer, checkpoint = built
    prepared, config = run.prepared, run.config
    own_ckpt = prepared.ckpt_dir if run.chief else model_folder.checkpoints_dir(run.out_dir)
    manager = tf.train.CheckpointManager(checkpoint, own_ckpt, max_to_keep=3)
    resumed_from = _restore(checkpoint, prepared.ckpt_dir, optimizer, run.total_steps)
    # Keep only the epochs the restored weights have actually finished.
    history = [h for h in prepared.history if h["epoch"] * run.settings.steps_per_epoch <= resumed_from]
    gfile().makedirs(own_ckpt)
    if run.chief:
        write_state(run, history)
    train_ds, val_ds, val_steps, cache = _inputs(run)
    validation = []
    if val_ds is not None:
        validation = prepared.task.validation_callbacks(
            prepared.info, run.dataset_dir, prepared.val_split, run.settings.kind
        )
    every_seconds = config.checkpoint_every_seconds
    if every_seconds is not None and run.settings.workers > 1:
        # A clock differs between workers, and every worker must save at the same step.
        log.warning("checkpoint_every_seconds is ignored with several workers; checkpoints follow steps")
        every_seconds = None
    saver = callbacks.Checkpointer(manager, config.checkpoint_every_steps, every_seconds)
    meter = callbacks.Throughput(run.settings.global_batch)
    fit_callbacks = [
        callbacks.DivergenceGuard(),
        saver,
        meter,
        callbacks.ScalarLogger(storage.join(run.out_dir, "logs", "train"), meter),
    ]
    return Fit(
        model=model,
        optimizer=optimizer,
        train_ds=train_ds,
        val_ds=val_ds,
        val_steps=val_steps,
        callbacks=fit_callbacks,
        saver=saver,
        meter=meter,
        input_cached=cache,
        resumed_from=resumed_from,
        history=history,
        validation=validation,
    )


def _restore(checkpoint: Any, ckpt_dir: str, optimizer: Any, total_steps: int) -> int:
    """Restores the latest checkpoint in ``ckpt_dir``, if any; returns the step it was at (0 without one).

    Every worker of a set restores from the chief's folder, so all start from the same step.
    """
    import tensorflow as tf

    from trainer import callbacks

    latest = tf.train.latest_checkpoint(ckpt_dir)
    if not latest:
        return 0
    checkpoint.restore(latest).assert_existing_objects_matched()
    resumed_from = callbacks.optimizer_step(optimizer)
    log.info("resuming from %s at step %d of %d", latest, resumed_from, total_steps)
    return resumed_from
