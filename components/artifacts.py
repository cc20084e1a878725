"""What several steps know about KFP artifacts on a cluster (not a step: any step may import it)."""

from __future__ import annotations

from trainer import model_folder, storage


def checkpoint_uri(model_uri: str) -> str | None:
    """Where a training step's checkpoints go: under the Model artifact's gs:// URI, or ``None``.

    On a cluster, KFP gives the component a local path (``/gcs/...``) and uploads it to the
    artifact's URI only after the step succeeds; checkpoints written there would die with a
    preempted pod. Written straight to the gs:// URI they survive, and a retried task (the same URI)
    resumes from them. Locally (kfp.local) the URI is a plain path: ``None`` keeps the default,
    ``<model path>/checkpoints``.
    """
    return model_folder.checkpoints_dir(model_uri) if storage.is_gcs(model_uri) else None
