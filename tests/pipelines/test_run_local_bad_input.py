"""``make run DATA=...`` with a source that cannot be a dataset: one line, non-zero, nothing written."""

import pytest

from pipelines.tools import run_local


def _bad_sources(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    no_images = tmp_path / "no_images"
    (no_images / "cats").mkdir(parents=True)
    (no_images / "cats" / "notes.txt").write_text("not an image")
    (no_images / "README.md").write_text("hello")
    return {"missing": tmp_path / "does" / "not" / "exist", "empty": empty, "no_images": no_images}


@pytest.mark.parametrize("kind", ["missing", "empty", "no_images"])
def test_bad_data_gives_one_line_error_and_leaves_nothing(tmp_path, capsys, kind):
    source = _bad_sources(tmp_path)[kind]
    root = tmp_path / "outputs"
    code = run_local.main(["--data", str(source), "--pipeline-root", str(root)])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and str(source) in err
    # No run started, so nothing a later run could take for a result.
    assert not root.exists() or not any(root.rglob("dataset.json"))
