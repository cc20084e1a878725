"""Fairing's one command, done with KFP: a notebook from the laptop to a run on a TPU.

``python -m components.notebook submit NOTEBOOK --host KFP_URL --staging gs://BUCKET/folder
[-p name=value ...] [--accelerator PRESET]`` (the same as ``python -m pipelines.tools.submit ...``):

1. checks the parameters against the notebook's ``parameters`` cell (a typo fails here, not on
   the TPU);
2. uploads the notebook to ``<staging>/notebooks/<name>-<sha256 prefix>.ipynb`` with
   google-cloud-storage (the name follows the content: a changed notebook never overwrites the one
   an earlier run read);
3. compiles the notebook pipeline in-process (``pipelines.notebook``; with ``--accelerator`` the
   preset is fixed at compile time, GKE TPU VM node selectors included) and starts a run with
   ``kfp.Client.create_run_from_pipeline_package``;
4. prints the run's URL.

Nothing is installed at run time: extra packages mean a derived image (``--image``, README).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from trainer import storage


class SubmitError(ValueError):
    """The submission cannot go ahead; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class Submitted:
    """A started run.

    Attributes:
        run_id: the KFP run's id.
        url: the run's page in the Kubeflow Pipelines UI.
        notebook_uri: where the notebook was uploaded.
        arguments: the pipeline arguments the run was started with.
    """

    run_id: str
    url: str
    notebook_uri: str
    arguments: dict[str, Any]


def staged_uri(staging: str, notebook: Path, data: bytes) -> str:
    """Where a notebook goes under the staging folder: ``notebooks/<stem>-<sha256[:12]>.ipynb``."""
    digest = hashlib.sha256(data).hexdigest()[:12]
    return storage.join(staging, "notebooks", f"{notebook.stem}-{digest}.ipynb")


def check_staging(staging: str) -> None:
    """Raises SubmitError unless ``staging`` is a gs:// folder (the cluster must read the notebook)."""
    if not storage.is_gcs(staging):
        raise SubmitError(
            f"--staging {staging}: expected a gs://BUCKET/folder the cluster can read (the step downloads "
            "the notebook from there)"
        )


def check_notebook(notebook: Path, staging: str, parameters: Mapping[str, Any]) -> None:
    """Checks, without the network, that the notebook exists and declares the parameters.

    Raises:
        SubmitError: ``staging`` is not a gs:// folder, or the notebook is missing.
        components.notebook.run.NotebookInputError: the file is not a notebook.
        components.notebook.params.NotebookParameterError: a parameter the notebook does not declare.
    """
    from components.notebook.params import prepare
    from components.notebook.run import read_notebook

    check_staging(staging)
    if not notebook.is_file():
        raise SubmitError(f"notebook {notebook} does not exist")
    prepare(read_notebook(notebook, f"notebook {notebook}"), parameters, str(notebook))


def upload_notebook(notebook: Path, staging: str, parameters: Mapping[str, Any]) -> str:
    """Checks the parameters against the notebook, then uploads it (once per content) to ``staging``.

    Returns:
        The notebook's gs:// URI.

    Raises:
        SubmitError: ``staging`` is not a gs:// folder, or the notebook is missing.
        components.notebook.run.NotebookInputError: the file is not a notebook.
        components.notebook.params.NotebookParameterError: a parameter the notebook does not declare.
    """
    check_notebook(notebook, staging, parameters)
    data = notebook.read_bytes()
    uri = staged_uri(staging, notebook, data)
    if not storage.exists(uri):
        storage.write_bytes(uri, data)
    return uri


def compile_package(path: Path, preset: Optional[str] = None, image: Optional[str] = None) -> Path:
    """Compiles the notebook pipeline to ``path``: runtime accelerator parameters, or ``preset`` fixed.

    Raises:
        ValueError: an unknown preset.
    """
    import yaml
    from kfp import compiler

    from pipelines import notebook
    from pipelines.tools.compile import set_image

    func = notebook.pipeline if preset is None else notebook.pipeline_for(preset)
    compiler.Compiler().compile(func, str(path))
    if image:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        set_image(documents, image)
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def submit(
    client: Any,
    notebook: Path,
    staging: str,
    parameters: Mapping[str, Any],
    *,
    ui_host: str,
    preset: Optional[str] = None,
    image: Optional[str] = None,
    run_name: Optional[str] = None,
    experiment_name: Optional[str] = None,
    pipeline_root: Optional[str] = None,
    cell_timeout_s: Optional[int] = None,
    timeout_s: Optional[int] = None,
) -> Submitted:
    """Uploads the notebook and starts a run of the notebook pipeline with ``client``.

    Args:
        client: a ``kfp.Client``.
        notebook: the local notebook.
        staging: a gs:// folder the cluster reads.
        parameters: name -> value for the notebook's ``parameters`` cell.
        ui_host: the Kubeflow Pipelines UI's address, for the run's URL.
        preset: an accelerator preset fixed at compile time; None for the pipeline's TPU v2-8.
        image: the image every step runs (a derived image with the notebook's extra packages).
        run_name: the run's name; None: ``notebook-<stem>``.
        experiment_name: the KFP experiment; None for the client's default.
        pipeline_root: where the run's artifacts go; None for the deployment's default.
        cell_timeout_s: seconds one cell may run; None for the pipeline's default.
        timeout_s: seconds the whole notebook may run; None for the pipeline's default.

    Returns:
        The started run.
    """
    uri = upload_notebook(notebook, staging, parameters)
    arguments: dict[str, Any] = {"notebook": uri, "parameters": dict(parameters)}
    if cell_timeout_s is not None:
        arguments["cell_timeout_s"] = cell_timeout_s
    if timeout_s is not None:
        arguments["timeout_s"] = timeout_s
    with tempfile.TemporaryDirectory(prefix="notebook-submit-") as tmp:
        package = compile_package(Path(tmp) / "notebook.yaml", preset, image)
        result = client.create_run_from_pipeline_package(
            str(package),
            arguments=arguments,
            run_name=run_name or f"notebook-{notebook.stem}",
            experiment_name=experiment_name,
            pipeline_root=pipeline_root,
            # A notebook run is never answered from the cache (its step is compiled uncached too).
            enable_caching=False,
        )
    url = f"{ui_host.rstrip('/')}/#/runs/details/{result.run_id}"
    return Submitted(result.run_id, url, uri, arguments)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path, help="the local .ipynb")
    parser.add_argument("--host", required=True, help="the KFP API endpoint, e.g. https://HOST/pipeline")
    parser.add_argument("--staging", required=True, help="a gs:// folder the cluster reads; the notebook goes here")
    parser.add_argument("-p", "--param", action="append", metavar="NAME=VALUE", help="a parameter (YAML value)")
    parser.add_argument(
        "--accelerator", help="a preset fixed at compile time: tpu-v2-8 (the default), gke-tpu-v5e-2x4, gpu-1, cpu..."
    )
    parser.add_argument("--image", help="the image the step runs (a derived image with extra packages)")
    parser.add_argument("--cell-timeout-s", type=int, help="seconds one cell may run")
    parser.add_argument("--timeout-s", type=int, help="seconds the whole notebook may run")
    parser.add_argument("--run-name", help="the run's name (default notebook-<name>)")
    parser.add_argument("--experiment", help="the KFP experiment (default: the client's)")
    parser.add_argument("--pipeline-root", help="where the run's artifacts go (default: the deployment's)")
    parser.add_argument("--namespace", default="kubeflow", help="the Kubeflow namespace of the KFP API")
    parser.add_argument("--ui-host", help="the KFP UI's address for the run URL (default: --host)")
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m pipelines.tools.submit") -> int:
    """Command-line entry point."""
    from components.cli import EXIT_FAILED, fail, parse_pairs
    from components.notebook.params import NotebookParameterError
    from components.notebook.run import NotebookInputError
    from trainer.config import ConfigError

    args = _parser(prog).parse_args(argv)
    if args.accelerator:
        from pipelines.accelerators import get_preset

        try:
            get_preset(args.accelerator)
        except ValueError as err:
            return fail(err)
    try:
        parameters = parse_pairs(args.param or [], "-p")
        # Everything that can be checked here is, before the client talks to the cluster.
        check_notebook(args.notebook, args.staging, parameters)
    except (SubmitError, ConfigError, NotebookInputError, NotebookParameterError) as err:
        return fail(err)
    import kfp
    import kfp_server_api
    import urllib3

    try:
        client = kfp.Client(host=args.host, namespace=args.namespace)
        submitted = submit(
            client,
            args.notebook,
            args.staging,
            parameters,
            ui_host=args.ui_host or args.host,
            preset=args.accelerator,
            image=args.image,
            run_name=args.run_name,
            experiment_name=args.experiment,
            pipeline_root=args.pipeline_root,
            cell_timeout_s=args.cell_timeout_s,
            timeout_s=args.timeout_s,
        )
    except (urllib3.exceptions.HTTPError, kfp_server_api.ApiException) as err:
        # Not bad input (exit 2): the cluster said no or did not answer; the notebook may be uploaded.
        print(f"error: the Kubeflow Pipelines API at {args.host} did not take the run: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"notebook: {submitted.notebook_uri}")
    print(f"run: {submitted.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
