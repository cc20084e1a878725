"""The train step's surface (components/surface.py): ``train_model`` against ``TrainConfig``."""

from components.surface import StepOutputs, Surface
from components.train.component import train_model
from trainer.config import TrainConfig
from trainer.tasks import task_types


def headline(out: StepOutputs) -> str:
    """The chosen model, throughput, the task's figure that sums the training up, the fit."""
    m, trained = out.metadata("metrics"), out.metadata("model")
    task_type = task_types().get(trained.get("task") or out.task or "")
    label, value = task_type.training_headline(m) if task_type is not None else ("", None)
    figure = f", final {label} {value:.4f}" if value is not None else ""
    # The model the task chose (model: auto), and why: the user did not name it.
    chosen = f"{trained['model']} ({trained['model_reason']}), " if trained.get("model_reason") else ""
    fitted = trained.get("fit_summary")
    if trained.get("budget_summary"):  # the budget's steps, not the fitted schedule's
        fitted = trained["budget_summary"] + (f"; {fitted.split(', ')[0]}" if fitted else "")
    return f"{chosen}{m.get('images_per_sec', 0):,.0f} training images/s{figure}" + (f"; {fitted}" if fitted else "")


SURFACES = (
    Surface(
        train_model,
        TrainConfig,
        aliases={
            "model_name": "model",
            "pod_accelerator_type": "accelerator_type",
            "pod_accelerator_count": "accelerator_count",
        },
        step_only=frozenset({"config_yaml", "data_checks"}),
        headline=headline,
        hub_secret=True,  # a backbone's or a preset's weights from a hub
        long_running=True,  # its time budget
        record="train",
    ),
)
