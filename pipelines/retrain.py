"""The ``retrain`` pipeline: a scheduled retraining that costs nothing when nothing changed.

The decide step (seconds, no TensorFlow, no accelerator) compares the source's fingerprint with the
data prod's (else staging's) model was trained on and reads its newest drift record. Only when it
says ``retrain`` does the condition ``new-data`` start the rest: convert, the data checks against
prod's data, training within ``retrain_budget`` with prod's model and options, warm-started from
its weights, the evaluation gated against prod, and, when blessed, the promotion to **demo** only
(staging and prod stay manual: the promote pipeline; ``promote_to`` says otherwise). ``nothing``
and ``drift`` end the run there, the reason in the decide step's outputs (docs/retraining.md). No
TensorFlow here.
"""

from kfp import dsl

from components.convert.component import convert_to_tfrecords
from components.evaluate.component import evaluate_model
from components.promote.component import promote_model
from components.retrain.component import decide_retrain
from components.retrain.run import RETRAIN
from components.train.component import train_model
from components.validate.component import validate_dataset
from pipelines import accelerators, platform

NAME = "retrain"
DESCRIPTION = (
    "Retrains when it matters: decides in seconds whether the source changed since prod's model was trained "
    "(or its traffic drifted); only new data starts convert -> checks -> budgeted training -> gate -> demo."
)
NEW_DATA = "new-data"  # the condition's name, as the compiled DAG shows it


def _decide(served_model_name, source, stages_root, drift, retrain_budget, thresholds, promote_to):
    return (
        decide_retrain(
            served_model_name=served_model_name,
            source=source,
            stages_root=stages_root,
            drift=drift,
            retrain_budget=retrain_budget,
            **thresholds,
            promote_to=promote_to,
            pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        )
        .set_display_name("Decide")
        .set_caching_options(False)  # the source and the stages change between runs
    )


def _train(decided, dataset, validated, accelerator_type, accelerator_count):
    task = train_model(
        dataset=dataset,
        model_name=decided.outputs["model"],
        model_options=decided.outputs["model_options"],
        config_yaml=decided.outputs["train_config_yaml"],  # the warm start: prod's model.keras
        epochs=0,  # the budget's schedule
        time_budget=decided.outputs["time_budget"],
        cost_budget=decided.outputs["cost_budget"],
        accelerator="auto",
        pod_accelerator_type=accelerator_type,
        pod_accelerator_count=accelerator_count,
        data_checks=validated.outputs["Output"],
    ).set_display_name("Train")
    accelerators.set_accelerator(task, accelerator_type, accelerator_count)
    return task


def _promote(stage, trained, dataset, evaluated, stages_root, served_model_name, serving_target):
    return (
        promote_model(
            model=trained, dataset=dataset, evaluation=evaluated.outputs["metrics"], stage=stage,
            stages_root=stages_root, pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER, model_name=served_model_name,
            run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER, target=serving_target,
        )
        .set_display_name(f"Promote to {stage}")
        .set_caching_options(False)  # a promotion changes what a stage serves
    )  # fmt: skip


def _new_data(decided, served_model_name, stages_root, promotion, accelerator):
    """Convert -> checks -> train -> gate -> demo (when blessed), and on to ``promote_to``."""
    converted = convert_to_tfrecords(
        source=decided.outputs["source_to_convert"],
        limit_per_split=decided.outputs["limit_per_split"],
        split_by=decided.outputs["split_by"],
        parent=decided.outputs["parent_dataset"],  # only what the served model's dataset lacks
    ).set_display_name("Convert to TFRecords")
    dataset = converted.outputs["dataset"]
    validated = validate_dataset(
        dataset=dataset, stages_root=stages_root, pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        served_model_name=served_model_name,
    ).set_display_name("Validate the data").set_caching_options(False)  # fmt: skip
    trained = _train(decided, dataset, validated, *accelerator).outputs["model"]
    evaluated = (
        evaluate_model(
            model=trained, dataset=dataset, stages_root=stages_root, pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
            served_model_name=served_model_name, value_thresholds=decided.outputs["gate_value_thresholds"],
            change_thresholds=decided.outputs["gate_change_thresholds"],
        )
        .set_display_name("Evaluate and gate")
        .set_caching_options(False)  # the gate compares with what prod serves now
    )  # fmt: skip
    serving_target, promote_to = promotion
    promoting = (trained, dataset, evaluated, stages_root, served_model_name, serving_target)
    with dsl.If(evaluated.outputs["Output"] == True, name="blessed"):  # noqa: E712 (a KFP condition)
        demo = _promote("demo", *promoting)
        with dsl.If(promote_to != "demo", name="staging-requested"):
            staging = _promote("staging", *promoting).after(demo)
            with dsl.If(promote_to == "prod", name="prod-requested"):
                _promote("prod", *promoting).after(staging)


@platform.pipeline(name=NAME, description=DESCRIPTION)
def pipeline(
    served_model_name: str = "classifier",
    source: str = "",
    stages_root: str = "",
    drift: str = "",
    retrain_budget: str = "10m",
    value_thresholds: dict = {},  # noqa: B006 (a pipeline default, never mutated)
    change_thresholds: dict = {},  # noqa: B006
    serving_target: str = "local",
    promote_to: str = "demo",
    accelerator_type: str = accelerators.DEFAULT_ACCELERATOR_TYPE,
    accelerator_count: int = accelerators.DEFAULT_ACCELERATOR_COUNT,
):
    """Retrains when the data changed; otherwise ends after the decision, having asked for no accelerator.

    Args:
        served_model_name: the model name the stages serve (classifier, detector): the task, the
            model, its options and the data it was trained on are prod's (else staging's).
        source: the images to look at; empty: the source prod's model was trained on.
        stages_root: the stage store; empty for <pipeline root>/stages.
        drift: a drift.json or its folder; empty: <stages root>/prod/drift/<served model name>/.
        retrain_budget: the train step's budget: a time (10m, 2h) or dollars at its accelerator's price (2.50 or $2.50).
        value_thresholds: the gate's metric -> bound; empty: the served model's task's defaults.
        change_thresholds: the gate's largest change against prod per metric; empty: the task's defaults.
        serving_target: where the stages serve the new version (local, kubernetes, kserve).
        promote_to: how far a blessed candidate goes on its own: demo (staging and prod stay
            manual: the promote pipeline), staging, or prod (through staging).
        accelerator_type: the train pod's accelerator resource (cloud-tpus.google.com/v2, nvidia.com/gpu, ...).
        accelerator_count: how many of it.
    """
    thresholds = {"value_thresholds": value_thresholds, "change_thresholds": change_thresholds}
    decided = _decide(served_model_name, source, stages_root, drift, retrain_budget, thresholds, promote_to)
    with dsl.If(decided.outputs["Output"] == RETRAIN, name=NEW_DATA):
        promotion, accelerator = (serving_target, promote_to), (accelerator_type, accelerator_count)
        _new_data(decided, served_model_name, stages_root, promotion, accelerator)
