"""The launcher pod's identity as environment variables, and the pod fields they come from.

The pipelines set them on the train task (``kfp.kubernetes.use_field_path_as_env``); the cluster
launchers read them (``ClusterSettings.from_env``) to own the workers' objects by the launcher
pod and create them in its namespace. Plain Python: the pipelines import it when compiling.
"""

POD_FIELD_PATHS = {
    "LTP_POD_NAME": "metadata.name",
    "LTP_POD_UID": "metadata.uid",
    "LTP_POD_NAMESPACE": "metadata.namespace",
}
