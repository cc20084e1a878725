"""The wiring of the main flow, written once: convert -> validate -> train -> evaluate/gate -> benchmark ->
demo -> (blessed) staging -> (asked for) prod.

``end_to_end`` (classification) and ``detection`` are two pipelines with their own defaults for
the Kubeflow run form: :func:`pipeline` generates each from the task (:func:`form_parameters`:
the config fields' types, defaults and documentation under the task's run defaults), and its body
calls :func:`build`. No TensorFlow here: compiling stays fast.
"""

import copy
import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from typing import Any, Optional

from kfp import dsl, kubernetes

from components.benchmark.component import benchmark_inference
from components.benchmark.config import BenchmarkConfig
from components.convert.component import convert_to_tfrecords
from components.convert.config import ConvertConfig
from components.evaluate.component import evaluate_model
from components.export.component import export_model
from components.export.config import ExportConfig
from components.launchers.identity import POD_FIELD_PATHS
from components.promote.component import promote_model
from components.report.component import build_report
from components.serving.config import PromoteConfig
from components.train.component import train_model
from components.validate.component import validate_dataset
from components.validate.config import ValidateConfig
from pipelines import accelerators, platform
from trainer.config import ConfigBase, EvaluateConfig, TrainConfig
from trainer.tasks import get_task


@dataclasses.dataclass(frozen=True)
class FormParameter:
    """One parameter of a task's run form, as the Kubeflow UI shows it.

    Attributes:
        name: its name (a parameter of :func:`build`).
        annotation: its KFP type (``int``, ``float``, ``str``, ``bool``, ``dict``, ``list``).
        default: the task's default, or the config field's (KFP's stand-in where that is None).
        description: the config field's documentation, and the task's note where it has one.
    """

    name: str
    annotation: type
    default: Any
    description: str


# Run-form parameter -> the config field it sets: its type, default and description come from there.
_FIELDS: dict[str, Optional[tuple[type[ConfigBase], str]]] = {  # None: the form's own (_OWN)
    "source": (ConvertConfig, "source"),
    "limit_per_split": (ConvertConfig, "limit_per_split"),
    "split_by": (ConvertConfig, "split_by"),
    "validation_policy": (ValidateConfig, "validation_policy"),
    "model": (TrainConfig, "model"),
    "model_options": (TrainConfig, "model_options"),
    "epochs": (TrainConfig, "epochs"),
    "steps_per_epoch": (TrainConfig, "steps_per_epoch"),
    "batch_size_per_replica": (TrainConfig, "batch_size_per_replica"),
    "augment": (TrainConfig, "augment"),
    "learning_rate": (TrainConfig, "learning_rate"),
    "time_budget": (TrainConfig, "time_budget"),
    "cost_budget": (TrainConfig, "cost_budget"),
    "patience": (TrainConfig, "patience"),
    "accelerator_type": None,
    "accelerator_count": None,
    "workers": (TrainConfig, "workers"),
    "launcher": (TrainConfig, "launcher"),
    "value_thresholds": (EvaluateConfig, "value_thresholds"),
    "change_thresholds": (EvaluateConfig, "change_thresholds"),
    "slice_thresholds": (EvaluateConfig, "slice_thresholds"),
    "slice_change_thresholds": (EvaluateConfig, "slice_change_thresholds"),
    "benchmark_images": (BenchmarkConfig, "num_images"),
    "benchmark_batch_size": (BenchmarkConfig, "batch_size"),
    "benchmark_target_spread": (BenchmarkConfig, "target_spread"),
    "export_formats": (ExportConfig, "export_formats"),
    "export_tolerances": (ExportConfig, "export_tolerances"),
    "serving_target": (PromoteConfig, "target"),
    "stages_root": None,
    "served_model_name": (PromoteConfig, "model_name"),
    "promote_to_prod": None,
    "serving_options": (PromoteConfig, "serving_options"),
    "canary_steps": (PromoteConfig, "canary_steps"),
    "allow_contract_change": (PromoteConfig, "allow_contract_change"),
    "serving_format": (PromoteConfig, "serving_format"),
}

# The run form's own parameters, which no step config holds: (type, default, description).
_OWN: dict[str, tuple[type, Any, str]] = {
    "accelerator_type": (
        str,
        accelerators.DEFAULT_ACCELERATOR_TYPE,
        "the train pod's accelerator resource: cloud-tpus.google.com/v2 (a TPU v2-8 on GKE), "
        "cloud-tpus.google.com/v3, google.com/tpu, nvidia.com/gpu, ... (pipelines/accelerators.py).",
    ),
    "accelerator_count": (
        int,
        accelerators.DEFAULT_ACCELERATOR_COUNT,
        "how many of it: 8 for a v2-8/v3-8, 1 for one GPU.",
    ),
    "stages_root": (
        str,
        "",
        "where stages keep model versions and history (a folder or gs://); empty means <pipeline root>/stages.",
    ),
    "promote_to_prod": (bool, False, "after staging passed, promote to prod as well."),
}

_KFP_TYPES = {int: int, float: float, str: str, bool: bool}


def _kfp_type(annotation: Any) -> type:
    """The KFP parameter type of a config field's annotation (Optional, Literal, tuple, Mapping)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return _kfp_type(next(a for a in args if a is not type(None)))
    if origin is typing.Literal:
        return type(args[0])
    if origin is tuple or annotation is tuple:
        return list
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return dict
    return _KFP_TYPES[annotation]


_STAND_INS = {int: 0, float: 0.0, str: "", bool: False, dict: {}, list: []}


def _from_field(section: type[ConfigBase], name: str) -> tuple[type, Any, str]:
    """(type, default, description) of a config field; None defaults become KFP's stand-ins."""
    field = next(f for f in dataclasses.fields(section) if f.name == name)
    kfp_type = _kfp_type(typing.get_type_hints(section)[name])
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    if default is None:
        default = _STAND_INS[kfp_type]
    description = section.field_docs()[name].replace("``", "")  # the UI shows plain text
    return kfp_type, kfp_type(default) if kfp_type in (dict, list) else default, description


# What a compile-time preset fixes: the run form has no say in it then.
_PRESET_FIXED = ("accelerator_type", "accelerator_count")


def form_parameters(task: str, preset: Optional[str] = None) -> dict[str, FormParameter]:
    """A task's run form: every parameter of :func:`build`, in order, with its type, default and description.

    Defaults are the task's where it has one (``trainer.tasks``: ``run_defaults`` and its
    ``form``, the default thresholds), else the config field's; descriptions are the config
    field's documentation, followed by the task's note (``run_defaults.notes``).

    Args:
        task: the task's registered name (``classification``, ``detection``).
        preset: a compile-time accelerator preset (``pipelines/accelerators.py``): the form then
            has no ``accelerator_type`` or ``accelerator_count``.
    """
    the_task = get_task(task)
    quick = the_task.run_defaults
    task_defaults = {
        "source": quick.data,
        "model": quick.model,
        "epochs": quick.epochs,
        "served_model_name": quick.served_model_name,
        "value_thresholds": dict(the_task.default_value_thresholds),
        **quick.form,
    }
    form = {}
    for name, field in _FIELDS.items():
        if preset and name in _PRESET_FIXED:
            continue
        kfp_type, default, description = _OWN[name] if field is None else _from_field(*field)
        default = copy.deepcopy(task_defaults.get(name, default))
        note = quick.notes.get(name)
        form[name] = FormParameter(name, kfp_type, default, f"{description} {note}" if note else description)
    return form


def run_form(task: str) -> dict[str, Any]:
    """The defaults of a task's run form, by parameter of :func:`build` (:func:`form_parameters`)."""
    return {name: p.default for name, p in form_parameters(task).items()}


def pipeline(task: str, name: str, description: str, summary: str, preset: Optional[str] = None) -> Any:
    """A ``@dsl.pipeline`` running :func:`build` with a task's run form: generated, not copied.

    KFP reads a pipeline function's ``inspect.signature`` (names, types, defaults), takes the
    parameters' descriptions from its docstring's ``Args:`` and calls it positionally; so the
    function takes ``*args`` and carries a generated ``__signature__`` and ``__doc__``. A config
    field added to ``_FIELDS`` reaches the UI's form with its type, default and documentation.

    Args:
        task: the task whose run form it is.
        name: the pipeline's name (the compiled YAML's, the UI's).
        description: the pipeline's description.
        summary: the docstring's first line.
        preset: a compile-time accelerator preset for the train step (``gke-tpu-v5e-2x4``, ``gpu-1``,
            ...; ``pipelines/accelerators.py``): its resources, node selectors and tolerations
            replace the run form's ``accelerator_type`` and ``accelerator_count``.

    Raises:
        ValueError: an unknown preset (the message lists the known ones).
    """
    if preset:
        accelerators.get_preset(preset)  # fail now, naming the known presets
    form = form_parameters(task, preset)

    def run(*args: Any) -> None:
        build(**dict(zip(form, args, strict=True)), preset=preset)

    run.__signature__ = inspect.Signature(
        [
            inspect.Parameter(
                p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.annotation
            )
            for p in form.values()
        ]
    )
    args = "\n".join(f"    {p.name}: {p.description}" for p in form.values())
    run.__doc__ = f"{summary}\n\nArgs:\n{args}\n"
    run.__name__ = run.__qualname__ = name.replace("-", "_")
    return platform.pipeline(name=name, description=description, labels=platform.preset_labels(preset))(run)


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
        **serving,  # target, serving_options, canary_steps, allow_contract_change, serving_format
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


def _validate(dataset, validation_policy, stages_root, served_model_name):
    """The data's checks before any accelerator is asked for: an error finding stops the run there.

    Its baseline is the dataset of the model prod (else staging) serves now, which changes between
    runs: never answered from KFP's cache.
    """
    return (
        validate_dataset(
            dataset=dataset,
            validation_policy=validation_policy,
            stages_root=stages_root,
            pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
            served_model_name=served_model_name,
        )
        .set_display_name("Validate the data")
        .set_caching_options(False)
    )


def _train(dataset, accelerator_type, accelerator_count, preset=None, **parameters):
    """The train task with its accelerator, and its pod's identity for the workers it may launch.

    With ``workers`` > 1 the step launches worker pods owned by its own pod (an ownerReference
    needs the pod's uid), in its namespace; each worker gets the step's accelerator request. A
    compile-time preset gives the pod its request, node selectors and tolerations, and names the
    step's price key (``trainer.budget.pricing.price_key`` reads a preset's name).
    """
    if preset:
        accelerator_type, accelerator_count = preset, accelerators.get_preset(preset).accelerator_count
    task = train_model(
        dataset=dataset,
        accelerator="auto",
        pod_accelerator_type=accelerator_type,  # its price key
        pod_accelerator_count=accelerator_count,
        **parameters,
    ).set_display_name("Train")
    if preset:
        accelerators.apply_preset(task, preset)
    else:
        accelerators.set_accelerator(task, accelerator_type, accelerator_count)
    for name, field_path in POD_FIELD_PATHS.items():
        kubernetes.use_field_path_as_env(task, name, field_path)
    return task


def build(
    *,
    source,
    limit_per_split,
    split_by,
    validation_policy,
    model,
    model_options,
    epochs,
    steps_per_epoch,
    batch_size_per_replica,
    learning_rate,
    augment,
    time_budget,
    cost_budget,
    patience,
    workers,
    launcher,
    value_thresholds,
    change_thresholds,
    slice_thresholds,
    slice_change_thresholds,
    benchmark_images,
    benchmark_batch_size,
    benchmark_target_spread,
    export_formats,
    export_tolerances,
    serving_target,
    stages_root,
    served_model_name,
    promote_to_prod,
    serving_options,
    canary_steps,
    allow_contract_change,
    serving_format,
    accelerator_type=None,
    accelerator_count=None,
    preset=None,
) -> None:
    """Adds the flow's tasks to the pipeline being defined; the arguments are its parameters.

    The task (classification, detection) is not a parameter: the dataset says it (dataset.json's
    ``task``), and every step asks it.
    """
    converted = convert_to_tfrecords(
        source=source, limit_per_split=limit_per_split, split_by=split_by
    ).set_display_name("Convert to TFRecords")
    dataset = converted.outputs["dataset"]
    validated = _validate(dataset, validation_policy, stages_root, served_model_name)

    trained_task = _train(
        dataset,
        accelerator_type,
        accelerator_count,
        preset,
        model_name=model,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        batch_size_per_replica=batch_size_per_replica,
        learning_rate=learning_rate,
        model_options=model_options,
        augment=augment,
        workers=workers,
        launcher=launcher,
        time_budget=time_budget,
        cost_budget=cost_budget,
        patience=patience,
        data_checks=validated.outputs["Output"],
    )
    trained = trained_task.outputs["model"]

    evaluated = (
        evaluate_model(
            model=trained,
            dataset=dataset,
            value_thresholds=value_thresholds,
            change_thresholds=change_thresholds,
            slice_thresholds=slice_thresholds,
            slice_change_thresholds=slice_change_thresholds,
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
        target_spread=benchmark_target_spread,
        accelerator="cpu-8",
    ).set_display_name("Benchmark inference")

    exported = _export(trained, dataset, evaluated, export_formats, export_tolerances, benchmark_batch_size)
    target = {"target": serving_target, "serving_options": serving_options, "canary_steps": canary_steps}
    target.update(allow_contract_change=allow_contract_change, serving_format=serving_format)  # contract, form
    demo = _promote_through_stages(trained, dataset, evaluated, stages_root, served_model_name, promote_to_prod, target)
    demo.after(evaluated, benchmarked, exported)

    _report(dataset, trained, evaluated, benchmarked, stages_root, validated).after(demo)


def _export(trained, dataset, evaluated, export_formats, export_tolerances, batch_size):
    """The blessed model's portable forms (written into its folder, so promotion carries them), each
    checked against its tolerance and priced against the served SavedModel; a model the gate did
    not bless gets none.
    """
    return export_model(
        model=trained,
        dataset=dataset,
        blessed=evaluated.outputs["Output"],
        export_formats=export_formats,
        export_tolerances=export_tolerances,
        batch_size=batch_size,
        accelerator="cpu-8",
    ).set_display_name("Export portable formats")


def _report(dataset, trained, evaluated, benchmarked, stages_root, validated):
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
            validation=validated.outputs["Output"],
            stages_root=stages_root,
            pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
            run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        )
        .set_display_name("Run report")
        .set_caching_options(False)
    )
