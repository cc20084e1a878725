"""The wiring of the main flow, written once: convert -> train -> evaluate/gate -> benchmark ->
demo -> (blessed) staging -> (asked for) prod.

``end_to_end`` (classification) and ``detection`` are two pipelines with their own defaults for
the Kubeflow run form (:func:`run_form`: the config sections' defaults under the task's run
defaults); both call :func:`build` inside their ``@dsl.pipeline`` body. No TensorFlow here:
compiling stays fast.
"""

from typing import Any

from kfp import dsl, kubernetes

from components.benchmark.component import benchmark_inference
from components.convert.component import convert_to_tfrecords
from components.evaluate.component import evaluate_model
from components.launchers.identity import POD_FIELD_PATHS
from components.promote.component import promote_model
from components.report.component import build_report
from components.train.component import train_model
from pipelines import accelerators
from trainer.config import BenchmarkConfig, PromoteConfig, TrainConfig
from trainer.tasks import get_task


def run_form(task: str) -> dict[str, Any]:
    """The defaults of a task's run form, by parameter of :func:`build` (the pipeline's signature).

    Each is the config section's default (0 or "" where the section's is None: KFP's stand-ins),
    or the task's (``trainer.tasks``: ``run_defaults`` and its ``form``, the default thresholds).
    tests/unit/test_parameter_surfaces.py checks the pipelines' signatures against the sections.

    Args:
        task: the task's registered name (``classification``, ``detection``).
    """
    the_task = get_task(task)
    quick = the_task.run_defaults
    train, bench, promote = TrainConfig(), BenchmarkConfig(), PromoteConfig()
    form = {
        "source": quick.data,
        "limit_per_split": 0,  # ConvertConfig.limit_per_split None: all
        "model": quick.model,
        "model_options": dict(train.model_options),
        "epochs": quick.epochs,
        "steps_per_epoch": 0,  # TrainConfig.steps_per_epoch None: one pass
        "batch_size_per_replica": train.batch_size_per_replica,
        "augment": train.augment,
        "learning_rate": train.learning_rate,
        "accelerator_type": accelerators.DEFAULT_ACCELERATOR_TYPE,
        "accelerator_count": accelerators.DEFAULT_ACCELERATOR_COUNT,
        "workers": train.workers,
        "launcher": train.launcher,
        "value_thresholds": dict(the_task.default_value_thresholds),
        "change_thresholds": {},
        "benchmark_images": bench.num_images,
        "benchmark_batch_size": bench.batch_size,
        "serving_target": promote.target,
        "kserve_mode": promote.kserve_mode,
        "canary_steps": [],  # PromoteConfig.canary_steps None: the target's default
        "stages_root": "",  # the components' stand-in: <pipeline root>/stages
        "served_model_name": quick.served_model_name,
        "promote_to_prod": False,
    }
    return {**form, **{k: dict(v) if isinstance(v, dict) else v for k, v in quick.form.items()}}


def _promote(stage: str, trained, dataset, evaluation, stages_root, served_model_name, serving):
    task = promote_model(
        model=trained,
        dataset=dataset,
        evaluation=evaluation,
        stage=stage,
        stages_root=stages_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        model_name=served_model_name,
        run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        **serving,  # the serving target and its settings: target, kserve_mode, canary_steps
    )
    # Promotion changes what a stage serves: never answer it from the cache.
    return task.set_display_name(f"Promote to {stage}").set_caching_options(False)


def _promote_through_stages(trained, dataset, evaluated, stages_root, served_model_name, promote_to_prod, serving):
    """Demo always; staging when blessed; prod when blessed and asked for. Returns the demo task."""
    metrics = evaluated.outputs["metrics"]
    demo = _promote("demo", trained, dataset, metrics, stages_root, served_model_name, serving)
    with dsl.If(evaluated.outputs["Output"] == True, name="blessed"):  # noqa: E712 (a KFP condition)
        staging = _promote("staging", trained, dataset, metrics, stages_root, served_model_name, serving)
        staging.after(demo)
        with dsl.If(promote_to_prod == True, name="prod-requested"):  # noqa: E712
            prod = _promote("prod", trained, dataset, metrics, stages_root, served_model_name, serving)
            prod.after(staging)
    return demo


def _train(dataset, accelerator_type, accelerator_count, **parameters):
    """The train task with its accelerator, and its pod's identity for the workers it may launch.

    With ``workers`` > 1 the step launches worker pods owned by its own pod (an ownerReference
    needs the pod's uid), in its namespace; each worker gets the step's accelerator request.
    """
    task = train_model(dataset=dataset, accelerator="auto", **parameters).set_display_name("Train")
    accelerators.set_accelerator(task, accelerator_type, accelerator_count)
    for name, field_path in POD_FIELD_PATHS.items():
        kubernetes.use_field_path_as_env(task, name, field_path)
    return task


def build(
    *,
    source,
    limit_per_split,
    model,
    model_options,
    epochs,
    steps_per_epoch,
    batch_size_per_replica,
    learning_rate,
    augment,
    accelerator_type,
    accelerator_count,
    workers,
    launcher,
    value_thresholds,
    change_thresholds,
    benchmark_images,
    benchmark_batch_size,
    serving_target,
    stages_root,
    served_model_name,
    promote_to_prod,
    kserve_mode,
    canary_steps,
) -> None:
    """Adds the flow's tasks to the pipeline being defined; the arguments are its parameters.

    The task (classification, detection) is not a parameter: the dataset says it (dataset.json's
    ``task``), and every step asks it.
    """
    converted = convert_to_tfrecords(source=source, limit_per_split=limit_per_split).set_display_name(
        "Convert to TFRecords"
    )
    dataset = converted.outputs["dataset"]

    trained_task = _train(
        dataset,
        accelerator_type,
        accelerator_count,
        model_name=model,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        batch_size_per_replica=batch_size_per_replica,
        learning_rate=learning_rate,
        model_options=model_options,
        augment=augment,
        workers=workers,
        launcher=launcher,
    )
    trained = trained_task.outputs["model"]

    evaluated = (
        evaluate_model(
            model=trained,
            dataset=dataset,
            value_thresholds=value_thresholds,
            change_thresholds=change_thresholds,
            stages_root=stages_root,
            pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
            served_model_name=served_model_name,
        )
        .set_display_name("Evaluate and gate")
        # The gate compares with what prod serves now, which changes between runs.
        .set_caching_options(False)
    )

    benchmarked = benchmark_inference(
        model=trained,
        dataset=dataset,
        num_images=benchmark_images,
        batch_size=benchmark_batch_size,
        accelerator="cpu-8",
    ).set_display_name("Benchmark inference")

    target = {"target": serving_target, "kserve_mode": kserve_mode, "canary_steps": canary_steps}  # and its settings
    demo = _promote_through_stages(trained, dataset, evaluated, stages_root, served_model_name, promote_to_prod, target)
    demo.after(evaluated, benchmarked)

    _report(dataset, trained, evaluated, benchmarked, stages_root).after(demo)


def _report(dataset, trained, evaluated, benchmarked, stages_root):
    """The run report (an HTML artifact the Kubeflow UI shows inline), from the steps' records."""
    return (
        build_report(
            dataset=dataset,
            model=trained,
            evaluation=evaluated.outputs["metrics"],
            confusion=evaluated.outputs["confusion"],
            blessing=evaluated.outputs["blessing"],
            samples=evaluated.outputs["samples"],
            benchmark=benchmarked.outputs["Output"],
            stages_root=stages_root,
            pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
            run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        )
        .set_display_name("Run report")
        .set_caching_options(False)
    )
