"""The papermill run, in a process of its own so that the step can kill it at its deadline.

``python -m components.notebook.runner REQUEST.json`` executes the request's notebook and writes
``status.json`` beside the request: ``{"ok": true}``, or what failed (a cell's error, or a cell
that ran past the per-cell timeout). Anything else (a kernel that died, papermill itself failing)
is raised: its traceback goes to the log and no status is written.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


def run(request: dict) -> dict:
    """Executes one notebook with papermill; returns the status to write.

    Args:
        request: ``input``, ``output`` (local paths), ``parameters``, ``kernel_name``, ``cwd``,
            ``cell_timeout_s``, ``autosave_s``.

    Returns:
        ``{"ok": True}``, or ``{"ok": False, "kind": "cell_error"|"cell_timeout", ...}``.
    """
    import papermill
    from nbclient.exceptions import CellTimeoutError
    from papermill.exceptions import PapermillExecutionError

    try:
        papermill.execute_notebook(
            request["input"],
            request["output"],
            parameters=request["parameters"],
            kernel_name=request["kernel_name"],
            language="python",
            cwd=request["cwd"],
            execution_timeout=request["cell_timeout_s"],
            # Cell outputs go to the step's log as they come, so a cluster's log shows progress.
            log_output=True,
            progress_bar=False,
            # Saved at every cell start and end, and every autosave_s inside a long cell: the
            # step copies these saves to the output URI, so a killed run keeps what it had.
            request_save_on_cell_execute=True,
            autosave_cell_every=request["autosave_s"],
        )
    except PapermillExecutionError as err:
        return {
            "ok": False,
            "kind": "cell_error",
            "exec_count": err.exec_count,
            "ename": err.ename,
            "evalue": err.evalue,
            "traceback": list(err.traceback),
        }
    except CellTimeoutError as err:
        return {"ok": False, "kind": "cell_timeout", "message": str(err)}
    return {"ok": True}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: exit 0 when the notebook ran through, 1 when a cell failed."""
    args = sys.argv[1:] if argv is None else argv
    # papermill logs the cells' outputs (log_output) at INFO on its logger: the step's log shows them.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    request_path = Path(args[0])
    status = run(json.loads(request_path.read_text()))
    (request_path.parent / "status.json").write_text(json.dumps(status))
    return 0 if status["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
