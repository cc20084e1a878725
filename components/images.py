"""Container images of the pipeline steps, defined once.

Every component runs in the project image (TensorFlow + kfp + this package). The name here is the
default baked into compiled YAML; ``make compile IMAGE=...`` (``pipelines.tools.compile --image``)
rewrites it in the compiled spec, so nothing reads the environment at import time.
"""

from kfp import dsl

PROJECT_IMAGE = "ghcr.io/lean-tpu-pipelines/lean-tpu-pipelines:0.1.0"
# The TensorFlow version inside PROJECT_IMAGE; the legacy GKE TPU Node path needs it as the pod
# annotation ``tf-version.cloud-tpus.google.com``.
TF_VERSION = "2.21.0"


def project_component(func=None, **kwargs):
    """``dsl.component`` with the project image and no pip installs at run time.

    The package is already in the image (and in the venv under kfp.local), so the component body
    only imports it.
    """
    kwargs.setdefault("base_image", PROJECT_IMAGE)
    kwargs.setdefault("install_kfp_package", False)
    if func is None:
        return lambda f: dsl.component(f, **kwargs)
    return dsl.component(func, **kwargs)
