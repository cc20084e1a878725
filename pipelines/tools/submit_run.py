"""``make submit``: a run of one of the project's pipelines on Kubeflow, with ``make run``'s parameters.

``python -m pipelines.tools.submit_run --pipeline detection --host KFP_URL [--config run.yaml]
[--set 'epochs=20 model_options.image_size=128'] [--experiment NAME] [--image IMAGE]``:

1. reads the parameters as ``make run`` does (``pipelines/tools/params.py``: the pipeline's run form,
   ``--config`` under ``--set``) and checks them against the form and the steps' configs, before
   the cluster is asked anything;
2. compiles the pipeline to ``<dir>/<name>.yaml`` (``make compile``'s file);
3. finds the pipeline version holding exactly that file (named after its content) or uploads it
   (``pipelines.tools.upload.ensure_version``: the pipeline ``lean-tpu-<name>`` is created first time);
4. starts a run of that version with the parameters that differ from the form's defaults
   (``kfp.Client.run_pipeline``) and prints its URL.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from pipelines.tools import params
from pipelines.tools.params import ParameterError, RunParameters


@dataclasses.dataclass(frozen=True)
class SubmittedRun:
    """A started run.

    Attributes:
        run_id: the KFP run's id.
        url: the run's page in the Kubeflow Pipelines UI.
        version: the pipeline version it runs (``pipelines.tools.upload.PipelineVersion``).
        arguments: the parameters it was started with (those that differ from the defaults).
    """

    run_id: str
    url: str
    version: Any
    arguments: dict[str, Any]


def task_of_pipeline(name: str) -> Optional[str]:
    """The task whose main pipeline ``name`` is (its model options are checked), else None."""
    from pipelines.tools.compile import PIPELINES

    return getattr(importlib.import_module(PIPELINES[name]), "TASK", None) if name in PIPELINES else None


def submit_parameters(name: str, config: Optional[str], set_text: str) -> RunParameters:
    """The run's parameters: the pipeline's form, ``config`` over it, ``set_text`` over that.

    Raises:
        KeyError: no pipeline of that name.
        ParameterError: an unknown name, a wrong type, a value a step refuses (one line each).
    """
    from pipelines.tools.compile import pipeline_func

    func = pipeline_func(name)
    layers = [params.read_config(config)] if config else []
    layers.append(params.parse_set(set_text, "SET"))
    resolved = params.resolve(params.run_form(func), layers, name)
    params.check_steps(func, resolved.values, task_of_pipeline(name))
    return resolved


def submit(
    client: Any,
    name: str,
    parameters: RunParameters,
    *,
    ui_host: str,
    package_dir: Path,
    image: Optional[str] = None,
    experiment: Optional[str] = None,
    run_name: Optional[str] = None,
    list_nodes: Optional[Callable[[], list[dict[str, Any]]]] = None,
) -> SubmittedRun:
    """Compiles the pipeline, uploads or reuses its version, and starts a run with ``client``.

    Args:
        client: a ``kfp.Client``.
        name: the pipeline (a name of ``pipelines.tools.compile.PIPELINES``).
        parameters: the run's parameters (:func:`submit_parameters`).
        ui_host: the Kubeflow Pipelines UI's address, for the run's URL.
        package_dir: where the compiled file is written.
        image: the image every step runs; None for the project's.
        experiment: the KFP experiment (made when missing); None for ``Default``.
        run_name: the run's name; None: ``<name> <time>``.
        list_nodes: the cluster's nodes, for the TPU preflight (``pipelines/tools/preflight.py``);
            None skips it.

    Raises:
        preflight.PreflightError: a step asks for a TPU the cluster cannot give (nothing uploaded).
    """
    import yaml

    from pipelines.tools import compile as compiling
    from pipelines.tools import preflight, upload

    path = compiling.compile_pipeline(name, package_dir, image)
    if list_nodes is not None:
        pipeline_spec, *rest = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        kube = (rest[0].get("platforms") or {}).get("kubernetes") or {} if rest else {}
        for note in preflight.check(pipeline_spec, kube, parameters.values, list_nodes):
            print(note)
    version = upload.ensure_version(client, path)
    experiment_id = client.create_experiment(name=experiment or "Default").experiment_id
    arguments = parameters.changed()
    run = client.run_pipeline(
        experiment_id=experiment_id,
        job_name=run_name or f"{name} {time.strftime('%Y-%m-%d %H-%M-%S')}",
        params=arguments,
        pipeline_id=version.pipeline_id,
        version_id=version.version_id,
    )
    url = f"{ui_host.rstrip('/')}/#/runs/details/{run.run_id}"
    return SubmittedRun(run.run_id, url, version, arguments)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipelines.tools.submit_run", description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", required=True, help="end_to_end, detection, sweep, ... (make compile's names)")
    parser.add_argument("--host", required=True, help="the KFP API endpoint, e.g. http://localhost:8080")
    parser.add_argument("--config", help="a YAML file of the pipeline's run-form parameters")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE ...", help="parameters over --config")
    parser.add_argument("--experiment", help="the KFP experiment (default: Default)")
    parser.add_argument("--run-name", help="the run's name (default: <pipeline> <time>)")
    parser.add_argument("--image", help="the image every step runs (default: the project's)")
    parser.add_argument("--dir", type=Path, default=Path("dist/pipelines"), help="where the compiled file goes")
    parser.add_argument("--namespace", default="kubeflow", help="the Kubeflow namespace of the KFP API")
    parser.add_argument("--ui-host", help="the KFP UI's address for the run URL (default: --host)")
    parser.add_argument(
        "--no-preflight", action="store_true",
        help="start the run without asking the cluster (kubeconfig) whether it has the TPU the run asks for",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``make submit``)."""
    from components.cli import EXIT_BAD_INPUT, EXIT_FAILED

    args = _parser().parse_args(argv)
    try:
        parameters = submit_parameters(args.pipeline, args.config, " ".join(args.set or []))
    except KeyError as err:
        print(f"error: --pipeline: {err.args[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ParameterError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"parameters: {parameters.describe()}")
    import kfp
    import kfp_server_api
    import urllib3

    from pipelines.tools.preflight import PreflightError, kube_nodes

    try:
        client = kfp.Client(host=args.host, namespace=args.namespace)
        done = submit(
            client, args.pipeline, parameters, ui_host=args.ui_host or args.host, package_dir=args.dir,
            image=args.image, experiment=args.experiment, run_name=args.run_name,
            list_nodes=None if args.no_preflight else kube_nodes(),
        )  # fmt: skip
    except PreflightError as err:
        for line in str(err).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (urllib3.exceptions.HTTPError, kfp_server_api.ApiException) as err:
        # Not bad input: the cluster said no or did not answer.
        print(f"error: the Kubeflow Pipelines API at {args.host} did not take the run: {err}", file=sys.stderr)
        return EXIT_FAILED
    what = "uploaded" if done.version.uploaded else "reused"
    print(f"pipeline version: {done.version.name} ({what})")
    print(f"run: {done.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
