"""trainer.storage on gs:// against a real local GCS emulator: the checks of tests/unit/test_storage.py."""

import os

import pytest

from tests.gcs_emulator import running_emulator
from tests.unit import test_storage as checks
from trainer import storage

pytestmark = pytest.mark.integration

BUCKET = "store"


@pytest.fixture(scope="module")
def gcs():
    with running_emulator(BUCKET):
        yield f"gs://{BUCKET}"


@pytest.fixture
def root(gcs, request):
    return f"{gcs}/{request.node.name}"


@pytest.mark.parametrize(
    "check",
    [
        checks.check_read_write,
        checks.check_listing,
        checks.check_copy_move_delete,
        checks.check_publish_is_all_or_nothing,
        checks.check_publish_tree,
        checks.check_staging,
    ],
    ids=lambda f: f.__name__,
)
def test_storage_on_gcs(check, root, tmp_path):
    check(root, str(tmp_path))


def test_copy_within_gcs_and_folder_placeholders(root):
    storage.write_bytes(f"{root}/a/x.bin", b"X")
    storage.copy_file(f"{root}/a/x.bin", f"{root}/b/x.bin")  # server-side copy
    assert storage.read_bytes(f"{root}/b/x.bin") == b"X"
    with pytest.raises(FileNotFoundError):
        storage.copy_file(f"{root}/a/none.bin", f"{root}/b/none.bin")
    bucket, name = storage.split_gcs(root)
    storage.client().bucket(bucket).blob(f"{name}/empty/").upload_from_string(b"")  # the console's "folder"
    assert storage.list_dirs(root) == ["a", "b", "empty"]
    assert storage.list_files(root) == ["a/x.bin", "b/x.bin"]  # a placeholder is no file


def test_stat_version_changes_when_an_object_is_replaced(root):
    storage.write_bytes(f"{root}/v.bin", b"1")
    first = storage.stat(f"{root}/v.bin")
    storage.write_bytes(f"{root}/v.bin", b"22")
    second = storage.stat(f"{root}/v.bin")
    assert (first.size, second.size) == (1, 2) and first.version != second.version


def test_reset_client_follows_the_emulator_address(gcs):
    storage.write_bytes(f"{gcs}/only-in-the-first.txt", b"1")
    first = storage.client()
    with running_emulator(BUCKET):  # a second emulator: reset_client() points the module at it
        assert storage.client() is not first
        assert not storage.exists(f"{gcs}/only-in-the-first.txt")
        storage.write_bytes(f"{gcs}/only-in-the-second.txt", b"2")
    # Back on the first emulator (running_emulator resets the client on the way out too).
    assert storage.exists(f"{gcs}/only-in-the-first.txt")
    assert not storage.exists(f"{gcs}/only-in-the-second.txt")
    assert os.environ["STORAGE_EMULATOR_HOST"].startswith("http://127.0.0.1:")
