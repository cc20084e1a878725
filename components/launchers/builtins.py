"""Registers the built-in launchers: ``local`` (processes on this machine) and the cluster ones.

Imported by the launcher registry on its first look-up, so the kubernetes client the cluster
launchers need is loaded only then.
"""

from components.launchers import register
from components.launchers.job import AutoClusterLauncher, IndexedJobLauncher
from components.launchers.jobset import JobSetLauncher
from components.launchers.local import LocalLauncher

register("jobset", JobSetLauncher)
register("job", IndexedJobLauncher)
register("auto", AutoClusterLauncher)
register("local", LocalLauncher)
