"""Command line: run a notebook here as the pipeline step does, or submit it to Kubeflow on a TPU.

Examples::

    python -m components.notebook run components/notebook/examples/gpu_vs_tpu.ipynb out/nb
        -p dataset=$PWD/out/digits -p 'batch_sizes=[32, 64]' -p epochs=2
    python -m components.notebook submit my.ipynb --host https://KFP_HOST/pipeline
        --staging gs://BUCKET/notebooks -p epochs=5 --accelerator tpu-v2-8

The notebook runs in a fresh working directory: give data paths absolute (or gs://).

``run`` writes ``<output>/<name>.ipynb`` (executed), ``<name>.html``, ``files/`` and ``result.json``;
exit status 0 when the notebook ran through, 1 when a cell failed or a time limit was hit, 2 for
bad input. ``submit`` is ``python -m pipelines.tools.submit`` (it compiles the notebook pipeline).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from components.cli import EXIT_FAILED, EXIT_OK, fail, load_section, parse_pairs, write_files
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env

PROG = "python -m components.notebook"


def _run(args: argparse.Namespace) -> int:
    from components.notebook.config import NotebookConfig
    from components.notebook.params import NotebookParameterError
    from components.notebook.run import NotebookInputError, NotebookOutputs, NotebookRunError, run_notebook

    try:
        flags = {
            "notebook": args.notebook,
            "cell_timeout_s": args.cell_timeout_s,
            "timeout_s": args.timeout_s,
            "files_dir": args.files_dir,
            "sync_every_s": args.sync_every_s,
        }
        config = load_section(NotebookConfig, args.config, flags)
        if args.param:
            # -p adds to (and overrides) the config file's parameters.
            config = config.replace(parameters={**config.parameters, **parse_pairs(args.param, "-p")})
        out = Path(args.output)
        stem = Path(config.notebook).stem
        outputs = NotebookOutputs(str(out / f"{stem}.ipynb"), str(out / f"{stem}.html"), str(out / "files"))
        result = run_notebook(config, outputs)
    except (ConfigError, NotebookInputError, NotebookParameterError) as err:
        return fail(err)
    except NotebookRunError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    write_files(str(out), {"result.json": result.to_dict()})
    print(
        f"notebook: {result.cells} code cells in {result.duration_s:.1f} s; executed {result.notebook}, "
        f"page {result.html}, {len(result.files)} files in {outputs.files}"
    )
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Parses the arguments and runs or submits the notebook."""
    configure_tensorflow_env()  # the kernel inherits it
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a notebook here, as the pipeline step does")
    run.add_argument("notebook", help="a .ipynb path or gs:// URI")
    run.add_argument("output", help="the folder to write the executed notebook, its page and files to")
    run.add_argument("-p", "--param", action="append", metavar="NAME=VALUE", help="a parameter (YAML value)")
    run.add_argument("--config", help="a YAML file of NotebookConfig fields (parameters, timeouts); flags win")
    run.add_argument("--cell-timeout-s", type=int, help="seconds one cell may run (default 3600)")
    run.add_argument("--timeout-s", type=int, help="seconds the whole notebook may run (default 14400)")
    run.add_argument("--files-dir", help="the folder the notebook's files are collected from (default outputs)")
    run.add_argument("--sync-every-s", type=float, help="seconds between copies of the notebook so far (30)")
    sub.add_parser(
        "submit",
        add_help=False,
        help="upload a notebook and start a run of the notebook pipeline on Kubeflow (see submit --help)",
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "submit":
        # Submitting compiles the notebook pipeline, which lives in pipelines/ (it imports this
        # step, not the other way round): the command is pipelines.tools.submit's.
        from pipelines.tools.submit import main as submit_main

        return submit_main(rest, prog=f"{PROG} submit")
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
