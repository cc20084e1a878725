"""The convert component under kfp.local: the adapter the end-to-end pipeline calls."""

import json
import os

import pytest

from components.convert.component import convert_to_tfrecords


@pytest.fixture(scope="module")
def local_kfp(tmp_path_factory):
    import kfp.local

    root = tmp_path_factory.mktemp("kfp-root")
    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    return root


@pytest.mark.slow
def test_component_converts_digits_and_sets_metadata(local_kfp):
    task = convert_to_tfrecords(source="digits", limit_per_split=40, workers=1)
    ds = task.outputs["dataset"]
    assert ds.metadata["counts"] == {"train": 40, "validation": 40, "test": 40}
    assert ds.metadata["schema_version"] == 2
    assert ds.metadata["image"] == {"height": 8, "width": 8, "channels": 1}
    manifest = json.load(open(os.path.join(ds.path, "dataset.json")))
    assert manifest["classes"] == [str(i) for i in range(10)]
    metrics = task.outputs["metrics"].metadata
    assert metrics["verified_records"] == 120
    assert metrics["rejected"] == 0


def test_component_signature_is_the_contract():
    params = convert_to_tfrecords.component_spec.inputs
    assert list(params)[:4] == ["source", "limit_per_split", "target_shard_mb", "compression"]
    assert params["limit_per_split"].default == 0
    assert params["compression"].default is None and params["compression"].optional  # Optional[str] = None
    assert params["verify"].default is True
    assert set(convert_to_tfrecords.component_spec.outputs) == {"dataset", "metrics"}


@pytest.mark.slow
def test_component_takes_optional_and_stand_in_parameters(local_kfp):
    """kfp.local 2.17.3 runs Optional[str] parameters given a value, left at None, or given ""."""
    gz = convert_to_tfrecords(
        source="digits", limit_per_split=12, compression="GZIP", source_format="digits", workers=1, verify=False
    )
    assert gz.outputs["dataset"].metadata["compression"] == "GZIP"
    plain = convert_to_tfrecords(source="digits", limit_per_split=12, compression="", workers=1, verify=False)
    assert plain.outputs["dataset"].metadata["compression"] is None
    assert plain.outputs["dataset"].metadata["counts"] == {"train": 12, "validation": 12, "test": 12}


@pytest.mark.slow
def test_component_fails_clearly_on_a_folder_without_images(local_kfp, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no images here")
    with pytest.raises(RuntimeError):
        convert_to_tfrecords(source=str(tmp_path), limit_per_split=10)
    produced = list(local_kfp.rglob("dataset.json"))
    assert all("digits" in p.read_text() for p in produced)  # nothing new looks like a dataset
