"""KFP component of the retrain step: whether a scheduled retraining has anything to do, and why."""

from typing import Optional

from kfp.dsl import Artifact, Markdown, Output, OutputPath

from components.images import project_component


@project_component
def decide_retrain(
    decision: Output[Artifact],
    report: Output[Markdown],
    reason: OutputPath(str),
    source_to_convert: OutputPath(str),
    model: OutputPath(str),
    model_options: OutputPath(dict),
    limit_per_split: OutputPath(int),
    split_by: OutputPath(str),
    time_budget: OutputPath(str),
    cost_budget: OutputPath(str),
    gate_value_thresholds: OutputPath(dict),
    gate_change_thresholds: OutputPath(dict),
    train_config_yaml: OutputPath(str),
    parent_dataset: OutputPath(str),
    served_model_name: str = "classifier",
    source: Optional[str] = None,
    stages_root: Optional[str] = None,
    drift: Optional[str] = None,
    retrain_budget: str = "10m",
    value_thresholds: Optional[dict] = None,
    change_thresholds: Optional[dict] = None,
    promote_to: str = "demo",
    pipeline_root: str = "",
) -> str:
    """Compares the source's fingerprint with the served model's training data and reads its drift record.

    Seconds, no TensorFlow, no accelerator: the pipeline's condition on the returned action starts
    the accelerator steps only when it is ``retrain``. (The action is the one returned value and
    the rest are output parameters: kfp.local resolves a condition on a task's ``Output`` only.)

    Args:
        decision: ``decision.json``: the action, its reason and what it was decided on.
        report: the decision as Markdown (the Kubeflow UI).
        reason: the decision in one line.
        source_to_convert: the source the retraining converts (the served model's when none was given).
        model: the served model's builder (the retraining trains the same).
        model_options: its options.
        limit_per_split: the served dataset's convert setting, kept.
        split_by: the served dataset's convert setting, kept.
        time_budget: the train step's time budget (``auto``: none).
        cost_budget: the train step's cost budget (``auto``: none).
        gate_value_thresholds: the gate's value thresholds (the given ones, else the task's).
        gate_change_thresholds: the gate's change thresholds against prod (the given ones, else the task's).
        train_config_yaml: the train step's further fields: ``warm_start`` (the served model's
            ``model.keras``) where it starts from it; empty otherwise.
        parent_dataset: the dataset the conversion grows from (the served model's: only the
            images it lacks are converted); empty: the whole source.
        served_model_name: the model name the stages serve (its task, model and data are prod's).
        source: the images to look at; empty: the source prod's (else staging's) model was trained on.
        stages_root: the stage store; empty for ``<pipeline root>/stages``.
        drift: a drift.json or its folder; empty: ``<stages root>/prod/drift/<model name>/``.
        retrain_budget: the train step's budget: a time (``10m``) or dollars (``2.50`` or ``$2.50``).
        value_thresholds: the gate's metric -> bound; empty: the task's defaults.
        change_thresholds: the gate's largest change against prod per metric; empty: the task's defaults.
        promote_to: how far a blessed candidate goes on its own: demo, staging or prod.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.

    Returns:
        The action: ``retrain``, ``drift`` or ``nothing``.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # the project's rule for every step (this one imports no TensorFlow)
    from components.params import none_if_empty
    from components.retrain.config import RetrainConfig
    from components.retrain.run import decide, describe, publish, report_markdown, write_outputs

    config = RetrainConfig(
        served_model_name=served_model_name,
        source=none_if_empty(source),
        stages_root=none_if_empty(stages_root),
        drift=none_if_empty(drift),
        retrain_budget=retrain_budget,
        value_thresholds=value_thresholds or {},
        change_thresholds=change_thresholds or {},
        promote_to=promote_to,
    )
    made = decide(config, pipeline_root=pipeline_root)
    for line in describe(made):
        print(line, flush=True)
    publish(made, decision.path)
    decision.metadata.update({"action": made.action, "reason": made.reason})
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(report_markdown(made))
    write_outputs(
        made, reason=reason, source=source_to_convert, model=model, model_options=model_options,
        limit_per_split=limit_per_split, split_by=split_by, time_budget=time_budget, cost_budget=cost_budget,
        value_thresholds=gate_value_thresholds, change_thresholds=gate_change_thresholds,
        train_config_yaml=train_config_yaml, parent=parent_dataset,
    )  # fmt: skip
    return made.action
