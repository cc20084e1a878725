"""The promote_model adapter, called as KFP calls it (its python_func) with real artifacts."""

import pytest
from kfp import dsl

from components.promote.component import promote_model
from components.serving import stages
from tests.promote_models import export_tiny_model, write_digits_dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_promote_model_adapter(tmp_path):
    export_tiny_model(str(tmp_path / "model" / "saved_model"), steps=150)
    dataset = write_digits_dataset(tmp_path / "dataset", count=24)
    report = dsl.Markdown(uri=str(tmp_path / "report.md"))
    version = promote_model.python_func(
        model=dsl.Model(uri=str(tmp_path / "model")),
        dataset=dsl.Dataset(uri=dataset),
        report=report,
        stage="demo",
        pipeline_root=str(tmp_path / "root"),
        model_name="clf",
        run_id="run-1",
    )
    assert version == 1
    root = str(tmp_path / "root" / "stages")  # stages_root "" derives it from the pipeline root
    current = stages.StageRegistry(root).read_current("demo", "clf")
    assert current.run == "run-1" and current.model_uri == str(tmp_path / "model")
    assert "accuracy" in current.metrics  # scored on the test split when no metrics are given
    text = (tmp_path / "report.md").read_text()
    assert "demo serves version 1" in text and "| prediction | yes |" in text
    assert report.metadata["version"] == 1 and report.metadata["no_op"] is False
