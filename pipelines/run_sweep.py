"""``make sweep``: the sweep pipeline under kfp.local over a CPU grid, then its table printed.

``python -m pipelines.run_sweep [--grid grid.yaml] [--source shapes:400] [--steps-per-epoch 24]
[--pipeline-root local_outputs]``. The default grid is 2 image sizes x 2 epoch counts x 2 batch
sizes of the small detector on the built-in shapes, plus one cell with a model option the detector
does not know, so a failed row (with its reason) shows too. A grid file is a YAML list of cells
(docs/sweep.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

from pipelines import sweep

DEMO_GRID = [
    {"accelerator": "cpu", "image_size": size, "epochs": epochs, "batch_size_per_replica": batch}
    for size in (32, 64)
    for epochs in (1, 2)
    for batch in (8, 16)
] + [{"accelerator": "cpu", "name": "cpu bad option", "epochs": 1, "model_options": {"no_such_option": 1}}]


def main(argv: list[str] | None = None) -> int:
    """Runs the grid locally and prints the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=Path, help="a YAML list of cells (default: the demo grid)")
    parser.add_argument("--source", default="shapes:400")
    parser.add_argument("--model", default="retinanet")
    parser.add_argument("--steps-per-epoch", type=int, default=24)
    parser.add_argument("--learning-rate", type=float, default=0.016)
    parser.add_argument("--pipeline-root", type=Path, default=Path("local_outputs"))
    args = parser.parse_args(argv)
    grid = yaml.safe_load(args.grid.read_text()) if args.grid else DEMO_GRID
    from kfp import local

    root = args.pipeline_root.resolve()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    started = time.time()
    sweep.pipeline(
        grid_cells=grid,
        source=args.source,
        model=args.model,
        model_options=sweep.LOCAL_MODEL_OPTIONS if args.model == "retinanet" else {},
        epochs=1,
        steps_per_epoch=args.steps_per_epoch,
        batch_size_per_replica=8,
        learning_rate=args.learning_rate,
    )
    reports = sorted(root.glob("sweep-*/join-training-grid/report"), key=lambda p: p.stat().st_mtime)
    if not reports:
        print(f"error: no report under {root}/sweep-*/join-training-grid", file=sys.stderr)
        return 1
    print(reports[-1].read_text())
    print(f"chart: {reports[-1].with_name('chart')}")
    print(f"grid wall time: {time.time() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
