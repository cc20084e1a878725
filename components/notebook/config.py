"""The notebook step's configuration: which notebook, its parameters, its time limits.

Imports neither TensorFlow nor kfp, nor papermill: the command line's ``--help`` stays instant.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from trainer.budget.limits import MAX_BUDGET_S
from trainer.config import ConfigBase

# A Python identifier: papermill writes each parameter as ``name = value`` in the notebook.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclasses.dataclass(frozen=True)
class NotebookConfig(ConfigBase):
    """How one notebook is run (README "Notebooks on a TPU").

    Attributes:
        notebook: the notebook to run: a ``gs://`` URI or a local path (inside the image on a
            cluster, e.g. the demo notebook).
        parameters: name -> value written into the notebook after its cell tagged ``parameters``.
            Names must be assigned in that cell. Integral floats become ints where the notebook's
            default is an int (kfp.local hands dict contents over as floats).
        cell_timeout_s: seconds one cell may run (papermill's ``execution_timeout``).
        timeout_s: seconds the whole notebook may run, kernel start included; the step kills
            the run at this deadline, keeping the cells that finished.
        files_dir: a folder relative to the notebook's working directory; whatever the notebook
            writes there is published as the step's ``files`` artifact. Its absolute path is also
            in the kernel's environment as ``NOTEBOOK_FILES_DIR``.
        sync_every_s: how often, while the notebook runs, the executed notebook so far is copied
            to its output URI (what survives a failed or killed step on a cluster).
    """

    _section: ClassVar[str] = "notebook."

    notebook: str = ""
    parameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    cell_timeout_s: int = 3600
    timeout_s: int = 4 * 3600
    files_dir: str = "outputs"
    sync_every_s: float = 30.0

    def validate(self) -> None:
        if not self.notebook:
            self._fail("notebook", "is empty; give a .ipynb path or gs:// URI")
        if not self.notebook.endswith(".ipynb"):
            self._fail("notebook", f"expected a .ipynb file, got {self.notebook!r}")
        bad = [k for k in self.parameters if not _NAME.fullmatch(str(k))]
        if bad:
            self._fail("parameters", f"names must be Python identifiers, got {bad}")
        if self.cell_timeout_s < 1:
            self._fail("cell_timeout_s", f"must be >= 1, got {self.cell_timeout_s}")
        if not 1 <= self.timeout_s <= MAX_BUDGET_S:
            self._fail(
                "timeout_s",
                f"must be 1..{MAX_BUDGET_S:.0f} s (a week: the pipeline's deadline on the step is longer), "
                f"got {self.timeout_s}",
            )
        rel = self.files_dir.strip()
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            self._fail("files_dir", f"expected a relative folder inside the working directory, got {self.files_dir!r}")
        if self.sync_every_s <= 0:
            self._fail("sync_every_s", f"must be > 0, got {self.sync_every_s}")
