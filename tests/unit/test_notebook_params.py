"""The notebook step's pure parts: the parameters cell, type restoration, config, HTML checks, kernelspec."""

import json
import sys

import nbformat
import pytest

from components.notebook import params
from components.notebook.config import NotebookConfig
from components.notebook.render import network_references, render_html
from components.notebook.run import KERNEL_NAME, NotebookInputError, fetch_notebook, write_kernelspec
from trainer.config import ConfigError

CELL = """\
# defaults
epochs = 3
learning_rate = 0.001
batch_sizes = [256, 512]
name: str = "cnn"
flags = {"steps": 10, "scale": 1.0}
use_xla = True
root = os.environ.get("ROOT", "/tmp")  # not a literal
%matplotlib inline
"""


def _notebook(cell_source=CELL, tagged=True):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(cell_source)
    if tagged:
        cell.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), cell, nbformat.v4.new_code_cell("print(epochs)")]
    return nb


def test_the_parameters_cell_declares_names_and_literal_defaults():
    declared = params.declared_parameters(CELL)
    assert declared.names == ("epochs", "learning_rate", "batch_sizes", "name", "flags", "use_xla", "root")
    assert declared.defaults["epochs"] == 3 and declared.defaults["batch_sizes"] == [256, 512]
    assert "root" not in declared.defaults  # a call has no type to restore


def test_integral_floats_become_ints_where_the_default_is_an_int():
    # what kfp.local (and a cluster's protobuf Struct) hands over for {"epochs": 3, ...}
    given = {
        "epochs": 3.0,
        "learning_rate": 1.0,
        "batch_sizes": [16.0, 32.0],
        "flags": {"steps": 2.0, "scale": 2.0},
        "use_xla": False,
        "root": 5.0,
    }
    out = params.prepare(_notebook(), given, "nb.ipynb")
    assert out["epochs"] == 3 and type(out["epochs"]) is int
    assert type(out["learning_rate"]) is float  # the default is a float: 1.0 stays 1.0
    assert out["batch_sizes"] == [16, 32] and all(type(b) is int for b in out["batch_sizes"])
    assert type(out["flags"]["steps"]) is int and type(out["flags"]["scale"]) is float
    assert out["use_xla"] is False
    assert type(out["root"]) is float  # no literal default: left as given
    assert params.coerce(2.5, 3) == 2.5  # not integral: never truncated


def test_an_undeclared_parameter_is_refused_naming_what_the_cell_declares():
    with pytest.raises(params.NotebookParameterError, match=r"epoch are not assigned.*declares: epochs, learning"):
        params.prepare(_notebook(), {"epoch": 3}, "nb.ipynb")


def test_parameters_for_a_notebook_without_a_tagged_cell_are_refused():
    with pytest.raises(params.NotebookParameterError, match="no cell tagged 'parameters'"):
        params.prepare(_notebook(tagged=False), {"epochs": 3}, "nb.ipynb")
    assert params.prepare(_notebook(tagged=False), {}, "nb.ipynb") == {}


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="notebook.notebook: expected a .ipynb"):
        NotebookConfig(notebook="x.py")
    with pytest.raises(ConfigError, match="notebook.files_dir"):
        NotebookConfig(notebook="x.ipynb", files_dir="../elsewhere")
    with pytest.raises(ConfigError, match="notebook.parameters: names must be Python identifiers"):
        NotebookConfig(notebook="x.ipynb", parameters={"not a name": 1})
    with pytest.raises(ConfigError, match="notebook.timeout_s"):
        NotebookConfig(notebook="x.ipynb", timeout_s=0)
    # kfp.local's floats are accepted where an int is meant
    assert NotebookConfig(notebook="x.ipynb", cell_timeout_s=60.0).cell_timeout_s == 60


def test_network_references_are_found_and_links_are_not():
    page = (
        '<script src="https://cdn.example/x.js"></script><link rel="stylesheet" href="//fonts.example/f.css">'
        "<style>@import url('https://fonts.example/g.css'); .a { background: url(http://img.example/i.png) }</style>"
        '<script type="module">const m = (await import("https://cdn.example/m.mjs")).default;</script>'
        '<a href="https://docs.example/">docs</a><img src="data:image/png;base64,AAAA">'
    )
    assert network_references(page) == [
        "//fonts.example/f.css",
        "http://img.example/i.png",
        "https://cdn.example/m.mjs",
        "https://cdn.example/x.js",
        "https://fonts.example/g.css",
    ]


def test_the_rendered_page_loads_nothing_from_the_network():
    nb = _notebook("x = 1")
    nb.cells.append(nbformat.v4.new_markdown_cell("$e^{i\\pi}$ and a [link](https://example.org)"))
    page = render_html(nb)
    assert network_references(page) == []
    assert "https://example.org" in page  # a link stays a link
    assert '<script src=""' not in page  # the emptied CDN script tags are gone


def test_the_kernelspec_runs_this_python(tmp_path):
    name = write_kernelspec(tmp_path, sys.executable, {"TF_ENABLE_ONEDNN_OPTS": "1"})
    spec = json.loads((tmp_path / "kernels" / name / "kernel.json").read_text())
    assert name == KERNEL_NAME
    assert spec["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    assert spec["env"] == {"TF_ENABLE_ONEDNN_OPTS": "1"}


def test_a_missing_notebook_is_a_clear_error(tmp_path):
    with pytest.raises(NotebookInputError, match="does not exist"):
        fetch_notebook(str(tmp_path / "nope.ipynb"), tmp_path)
    with pytest.raises(NotebookInputError, match="expected a gs:// URI or a local path"):
        fetch_notebook("s3://bucket/nb.ipynb", tmp_path)
