"""Where a training reads its dataset and writes its model folder: local paths, or URIs for worker pods.

Plain Python (no kubernetes client): the train step asks it on every run.
"""

from __future__ import annotations


def training_locations(
    dataset: tuple[str, str], model: tuple[str, str], workers: int, launcher: str
) -> tuple[str, str]:
    """The dataset folder and model folder a training reads and writes, given (path, uri) of each.

    One process and local workers use the step's local paths. Worker pods cannot reach the
    launcher pod's disk (where KFP downloads inputs and collects outputs), so they read the
    dataset's URI and the chief writes straight to the model's URI (gs://), as the checkpoints
    already go; KFP's upload of the step's then empty local model folder adds nothing over it.

    Args:
        dataset: the dataset artifact's (local path, URI).
        model: the model artifact's (local path, URI).
        workers: ``TrainConfig.workers``.
        launcher: ``TrainConfig.launcher``.
    """
    from components.launchers import choose_launcher

    if workers > 1 and choose_launcher(launcher) != "local":
        return dataset[1], model[1]
    return dataset[0], model[0]
