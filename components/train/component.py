"""KFP component: train a model on TFRecords with the accelerator the pod was given."""

from typing import Optional

from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.images import project_component


@project_component
def train_model(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    model_name: str = "mnist_cnn",
    epochs: int = 3,
    steps_per_epoch: int = 0,
    batch_size_per_replica: int = 128,
    learning_rate: float = 0.001,
    accelerator: str = "auto",
    augment: bool = False,
    config_yaml: str = "",
    model_options: Optional[dict] = None,
    workers: int = 1,
    launcher: str = "auto",
    time_budget: str = "auto",
    cost_budget: str = "auto",
    patience: str = "auto",
    pod_accelerator_type: str = "",
    pod_accelerator_count: int = 0,
    data_checks: dict = {},  # noqa: B006 (a component default, never mutated)
):
    """Trains ``model_name`` on the dataset and writes the model folder (SavedModel, .keras, card).

    A retried task (a preempted TPU) resumes from the checkpoints under the model's URI.

    Args:
        dataset: the TFRecord dataset folder (``dataset.json`` + shards).
        model: the model folder: saved_model/, model.keras, config.yaml, model_card.md,
            checkpoints/, logs/ (TensorBoard), training.json.
        metrics: final loss/accuracy (train and validation), images/s, steps.
        model_name: a model builder of the dataset's task (``mnist_cnn``, ``transfer_classifier``,
            ``retinanet``), or ``auto``: the task chooses from the dataset's images.
        epochs: training epochs; 0: a schedule in steps fitted to the data (tasks that fit one).
        steps_per_epoch: steps per epoch; 0 means one pass over the training split.
        batch_size_per_replica: examples per accelerator core per step (128 suits a TPU core).
        learning_rate: learning rate for a global batch of 128, scaled with the global batch.
        accelerator: ``auto`` detects; ``tpu``, ``gpu``, ``cpu`` fail if not there.
        augment: random flips (and, for classification, small translations) of the training images.
        config_yaml: further TrainConfig fields as YAML (e.g. ``precision: float32``); the
            parameters above win over it. Empty for none.
        model_options: the model builder's options (detection: image_size, anchor_size, preset,
            ...); they win over ``model_options`` in ``config_yaml``. None or empty for none.
        workers: worker pods (or local processes) training together; 1 trains in this pod. With
            more, this pod launches them (each with this pod's accelerator request, image, node
            selectors and tolerations), waits, and deletes them; the chief's folder is ``model``.
        launcher: ``auto`` (a JobSet where the cluster serves it, else an Indexed Job; local
            processes outside a cluster), ``jobset``, ``job`` or ``local``.
        time_budget: ``auto`` (none) or the time this step may take, such as ``90s``, ``10m``,
            ``2h``: the schedule is laid out over the steps that fit (epochs 0 with a budget).
        cost_budget: ``auto`` (none) or US dollars this step may cost at the price of its
            accelerator, such as ``2.50``.
        patience: early stopping: ``auto``, a number of evaluations without improvement, or ``off``.
        pod_accelerator_type: the accelerator resource this pod asked for (empty for CPU only):
            its price key (``trainer.budget.pricing.price_key``) prices the step. (Not named
            ``accelerator_type``: KFP's compiler injects a task's resource settings as inputs of
            that name, which would replace this one.)
        pod_accelerator_count: how many of it (0 for CPU only).
        data_checks: what the validate step returned (``validation.json``): its outcome and
            findings become the model card's "Data checks" section. Empty: none is written.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.artifacts import checkpoint_uri
    from components.launchers.locations import training_locations
    from components.launchers.training import run_training
    from components.params import none_if_empty
    from components.progress import reporter
    from components.train.run import describe_model, scalar_metrics, train_config

    config = train_config(
        config_yaml,
        model=model_name,
        epochs=none_if_empty(epochs),
        steps_per_epoch=steps_per_epoch or None,
        batch_size_per_replica=batch_size_per_replica,
        learning_rate=learning_rate,
        accelerator=accelerator,
        augment=augment,
        model_options=model_options,
        workers=workers,
        launcher=launcher,
        time_budget=time_budget,
        cost_budget=cost_budget,
        patience=patience,
        accelerator_type=pod_accelerator_type,
        accelerator_count=pod_accelerator_count,
    )
    dataset_dir, model_dir = training_locations(
        (dataset.path, dataset.uri), (model.path, model.uri), config.workers, config.launcher
    )
    summary = run_training(
        dataset_dir,
        model_dir,
        config,
        checkpoint_dir=checkpoint_uri(model.uri),
        on_progress=reporter("train", "steps", every_s=0),  # the training throttles its own lines
    )
    if data_checks:
        from components.data_checks import card_section
        from trainer.model_folder import append_to_card

        append_to_card(model_dir, card_section(data_checks))
    model.metadata.update(describe_model(summary, config))
    for name, value in scalar_metrics(summary).items():
        metrics.log_metric(name, value)
