r"""Command line: ``python -m components.train --dataset D --model-dir M [options]`` (no Kubeflow needed).

The train step outside KFP. It hands over to ``python -m trainer`` (the entry point the plain TPU
Job in ``manifests/tpu-job/`` runs), which builds the same ``TrainConfig`` as the component
(``--config`` YAML, ``--set field=value``, and flags for the component's parameters) and calls the
same ``trainer.train.train``. The model folder gets what the component's Model artifact gets:
saved_model/, model.keras, config.yaml, model_card.md, checkpoints/, logs/, training.json; the
training summary is printed as JSON.

Examples:
    python -m components.train --dataset data/fashion-mnist --model-dir models/run1 --epochs 3
    python -m components.train --dataset gs://bucket/ds --model-dir gs://bucket/models/run1 \
        --config train.yaml --set precision=float32 --accelerator tpu
    python -m components.train --dataset data/fashion-mnist --model-dir models/run2 --set workers=2

With ``workers`` > 1 the step starts that many workers through its launcher (``--set launcher=local``
runs them as processes here, on loopback; docs/training.md) and prints the chief's summary.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``python -m trainer`` with these arguments (exit status: 0 done, 2 bad input, 1 failed).

    The training is the step's (``components.launchers.training.run_training``): one process, or the workers.
    """
    from components.launchers import LaunchError
    from components.launchers.training import run_training
    from trainer.__main__ import main as trainer_main

    try:
        return trainer_main(argv, prog="python -m components.train", train_fn=run_training)
    except LaunchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
