"""Conversion from and to gs:// against a real local GCS emulator (gcp-storage-emulator) on loopback."""

import io
import json

import numpy as np
import pytest
from PIL import Image

from components.convert import convert, verify
from components.convert.config import ConvertConfig
from tests.gcs_emulator import running_emulator
from trainer import storage
from trainer.tfrecords import load_dataset_info

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def emulator():
    with running_emulator("data"):
        yield


def _bucket():
    return storage.client().bucket("data")


def test_builtin_source_to_gcs_output_verifies_and_reruns_as_noop(emulator):
    config = ConvertConfig(source="digits", limit_per_split=40, target_shard_mb=0.004, workers=2)
    manifest = convert(config, "gs://data/datasets/digits")
    names = sorted(b.name for b in _bucket().list_blobs(prefix="datasets/digits/"))
    files = [s["file"] for v in manifest["splits"].values() for s in v["shards"]]
    assert len(files) > 3  # several shards, uploaded together through transfer_manager
    assert sorted(f"datasets/digits/{f}" for f in files + ["dataset.json", "keys.jsonl", "rejected.jsonl"]) == names
    loaded = load_dataset_info("gs://data/datasets/digits")
    assert loaded.plan_key == manifest["plan_key"]
    for info in manifest["splits"].values():  # the manifest's checksums are the ones GCS computed on upload
        for shard in info["shards"]:
            blob = _bucket().get_blob(f"datasets/digits/{shard['file']}")
            assert blob.crc32c == shard["crc32c"] and blob.size == shard["bytes"]
    assert verify("gs://data/datasets/digits")["records"] == 120
    lines = []
    convert(config, "gs://data/datasets/digits", log=lines.append)
    assert "up to date" in lines[0]


@pytest.fixture(scope="module")
def photos(emulator):
    bucket = _bucket()
    for i in range(4):
        buf = io.BytesIO()
        Image.fromarray(np.full((5, 6, 3), i * 40, np.uint8)).save(buf, "PNG")
        bucket.blob(f"photos/{'ab'[i % 2]}/{i}.PNG").upload_from_string(buf.getvalue())
    bucket.blob("photos/a/.hidden.png").upload_from_string(b"x")
    bucket.blob("photos/a/broken.jpg").upload_from_string(b"\xff\xd8\xff\xe0 truncated")
    lines = [f"gs://data/photos/{'ab'[i % 2]}/{i}.PNG,{'ab'[i % 2]}" for i in range(4)]
    bucket.blob("photos.csv").upload_from_string("path,label\n" + "\n".join(lines) + "\ngs://data/gone.png,a\n")
    return bucket


def test_image_folder_on_gcs_to_gcs(photos):
    bucket = photos
    manifest = convert(ConvertConfig(source="gs://data/photos", splits={"train": 1.0}, workers=1), "gs://data/out")
    assert manifest["classes"] == ["a", "b"]
    assert manifest["splits"]["train"]["count"] == 4
    assert manifest["rejected"] == 1 and manifest["ignored"] == {"hidden": 1}
    rejected = bucket.blob("out/rejected.jsonl").download_as_text()
    assert "truncated JPEG" in json.loads(rejected.splitlines()[0])["reason"]


def test_csv_manifest_on_gcs_with_a_row_pointing_nowhere(photos):
    manifest = convert(ConvertConfig(source="gs://data/photos.csv", splits={"train": 1.0}, workers=1), "gs://data/m")
    assert manifest["splits"]["train"]["count"] == 4
    rejected = _bucket().blob("m/rejected.jsonl").download_as_text()
    assert "unreadable: No such object" in rejected


def test_empty_class_folders_on_gcs_are_reported(photos):
    bucket = photos
    bucket.blob("classes/a/0.png").upload_from_string(bucket.blob("photos/a/0.PNG").download_as_bytes())
    bucket.blob("classes/empty/").upload_from_string(b"")  # the Cloud console's "create folder"
    bucket.blob("classes/docs/readme.txt").upload_from_string(b"no images")
    bucket.blob("classes/.trash/x.png").upload_from_string(b"x")  # hidden: no class folder
    config = ConvertConfig(source="gs://data/classes", splits={"train": 1.0}, workers=1)
    manifest = convert(config, "gs://data/classes-out")
    assert manifest["classes"] == ["a"] and manifest["empty_classes"] == ["docs", "empty"]
    assert load_dataset_info("gs://data/classes-out").empty_classes == ("docs", "empty")


def test_coco_on_gcs_is_read_strictly(emulator):
    bucket = _bucket()
    for i in range(2):
        buf = io.BytesIO()
        Image.fromarray(np.full((8, 10, 3), 90, np.uint8)).save(buf, "PNG")  # 10 wide, 8 high
        bucket.blob(f"coco/images/{i}.png").upload_from_string(buf.getvalue())
    coco = {
        "images": [
            {"id": 1, "file_name": "images/0.png", "width": 10, "height": 8},
            {"id": 2, "file_name": "images/1.png", "width": 20, "height": 16},  # not the file's size
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 3, "bbox": [6, 4, 8, 6]},  # partly outside: clipped
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [1, 1, 0, 2]},  # zero area: dropped
            {"id": 3, "image_id": 2, "category_id": 3, "bbox": [1, 1, 2, 2]},
        ],
        "categories": [{"id": 3, "name": "thing"}],
    }
    bucket.blob("coco/instances.json").upload_from_string(json.dumps(coco))
    config = ConvertConfig(source="gs://data/coco/instances.json", splits={"train": 1.0}, workers=1)
    manifest = convert(config, "gs://data/coco-out")
    assert manifest["task"] == "detection" and manifest["splits"]["train"]["count"] == 1
    assert manifest["rejected_reasons"] == {"size mismatch": 1}
    assert manifest["boxes"]["clipped"] == 1 and manifest["boxes"]["dropped"] == 1
    rows = [json.loads(line) for line in bucket.blob("coco-out/rejected.jsonl").download_as_text().splitlines()]
    assert [r.get("annotation_id") for r in rows] == [None, 2]
    assert verify("gs://data/coco-out")["records"] == 1
