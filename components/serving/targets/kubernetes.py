"""Target ``kubernetes``: the stage's kustomize overlay, one TensorFlow Serving Deployment per stage.

The cluster work is :mod:`components.serving.deploy` (render, pin the versions, server-side
apply, wait for the rollout); this class is its face to promote, rollback and monitor.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Optional

from components.serving.targets.base import Endpoints, ServingTarget, register

log = logging.getLogger(__name__)


@register
class KubernetesTarget(ServingTarget):
    """Serves a stage as the Deployment of ``manifests/serving/overlays/<stage>``, models read from GCS.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``; None loads the in-cluster
            configuration, else the kubeconfig, at each rollout.
        manifests_dir: the ``manifests/serving`` folder; None finds the project's.
        poll_interval_s: pause between rollout status reads.
        cluster_domain: the cluster's DNS domain, for the Service URL.
    """

    name = "kubernetes"
    load_profile = "cluster"

    def __init__(
        self,
        api_client: Optional[Any] = None,
        manifests_dir: Optional[str | Path] = None,
        poll_interval_s: float = 2.0,
        cluster_domain: str = "cluster.local",
    ):
        self.api_client = api_client
        self.manifests_dir = manifests_dir
        self.poll_interval_s = poll_interval_s
        self.cluster_domain = cluster_domain

    def check(self, stages_root: str) -> None:
        """The pods load the models from GCS: ``stages_root`` must be ``gs://bucket[/prefix]``.

        Raises:
            ValueError: it is not.
        """
        from components.serving import deploy

        deploy.check_gcs_root(stages_root)

    def _options(self) -> dict[str, Any]:
        return {
            "manifests_dir": self.manifests_dir,
            "poll_interval_s": self.poll_interval_s,
            "cluster_domain": self.cluster_domain,
        }

    def serve(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Apply the stage's objects with ``models`` pinned and wait for the rollout.

        Raises:
            components.kube.RolloutTimeout: the rollout did not finish in ``timeout_s``.
            components.kube.KubeDeployError: rendering or applying failed.
        """
        from components.serving import deploy

        version = models[changed]
        deploy.deploy_stage(
            stage, stages_root, changed, version, timeout_s, self.api_client, others=models, **self._options()
        )

    def restore(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Re-apply the stage's objects with ``models`` pinned (the old pod template) and wait.

        When ``models`` is empty (the first version of the stage's only model failed) nothing is
        applied: the failed version was retired from the model path.
        """
        from components.serving import deploy

        if not models:
            log.warning("%s had no earlier version; the failed version was retired from the model path", stage)
            return
        name = changed if changed in models else next(iter(sorted(models)))
        deploy.rollback_stage(
            stage, stages_root, name, models[name], timeout_s, self.api_client, others=models, **self._options()
        )

    @contextlib.contextmanager
    def endpoints(self, stages_root: str, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
        """Every model answers at the stage's Service (its in-cluster DNS name and REST port)."""
        from components.serving import deploy

        url = deploy.service_url(deploy.render_stage(stage, self.manifests_dir), self.cluster_domain)
        yield Endpoints(urls={name: url for name in models})
