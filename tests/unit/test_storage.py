"""trainer.storage on local folders. tests/integration/test_storage_gcs.py runs the same checks on gs://.

The ``check_*`` functions take a root (a folder or a gs:// URI) and a local scratch folder.
"""

import os

import pytest

from trainer import storage


def check_read_write(root, scratch):
    path = storage.join(root, "a", "b.bin")
    storage.write_bytes(path, b"\x00\x01")
    assert storage.read_bytes(path) == b"\x00\x01"
    storage.write_text(storage.join(root, "t.txt"), "héllo")
    assert storage.read_text(storage.join(root, "t.txt")) == "héllo"
    storage.write_json(storage.join(root, "j.json"), {"n": 1})
    assert storage.read_json(storage.join(root, "j.json")) == {"n": 1}
    assert storage.read_json(storage.join(root, "nothing.json")) is None
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(storage.join(root, "nothing.bin"))
    storage.write_bytes(path, b"new")  # overwrite whole
    assert storage.read_bytes(path) == b"new"
    assert storage.exists(path) and not storage.exists(storage.join(root, "a"))  # a folder is no file
    assert storage.isdir(storage.join(root, "a")) and not storage.isdir(storage.join(root, "zzz"))
    info = storage.stat(path)
    assert info.size == 3 and storage.stat(storage.join(root, "nothing")) is None


def check_listing(root, scratch):
    for rel in ("x/1", "x/2", "x/sub/3", "top"):
        storage.write_bytes(storage.join(root, rel), rel.encode())
    assert storage.list_files(root) == ["top", "x/1", "x/2", "x/sub/3"]
    assert storage.sizes(storage.join(root, "x")) == {"1": 3, "2": 3}
    assert storage.list_dirs(root) == ["x"]
    assert storage.list_dirs(storage.join(root, "x")) == ["sub"]
    assert storage.list_files(storage.join(root, "absent")) == [] and storage.sizes(storage.join(root, "absent")) == {}
    assert [f.path for f in storage.list_info(storage.join(root, "x"), recursive=False)] == ["1", "2"]


def check_copy_move_delete(root, scratch):
    src = os.path.join(scratch, "tree")
    os.makedirs(os.path.join(src, "variables"))
    with open(os.path.join(src, "saved_model.pb"), "wb") as f:
        f.write(b"graph")
    with open(os.path.join(src, "variables", "v.index"), "wb") as f:
        f.write(b"index")
    dst = storage.join(root, "copy")
    assert storage.copy_tree(src, dst, last=["saved_model.pb"]) == ["variables/v.index", "saved_model.pb"]
    assert storage.tree_sha256(dst) == storage.tree_sha256(src)
    moved = storage.join(root, "moved")
    storage.move_tree(dst, moved)
    assert storage.list_files(dst) == [] and storage.list_files(moved) == ["saved_model.pb", "variables/v.index"]
    back = os.path.join(scratch, "back")  # and back to a local folder
    storage.copy_tree(moved, back)
    assert storage.tree_sha256(back) == storage.tree_sha256(src)
    storage.delete(storage.join(moved, "saved_model.pb"))
    storage.delete(storage.join(moved, "saved_model.pb"))  # absent: nothing happens
    assert storage.list_files(moved) == ["variables/v.index"]
    storage.delete_tree(moved)
    storage.delete_tree(moved)
    assert storage.list_files(moved) == []
    with pytest.raises(FileNotFoundError):
        storage.copy_tree(moved, dst)


def check_publish_is_all_or_nothing(root, scratch):
    folder = storage.join(root, "dataset")
    storage.write_bytes(storage.join(folder, "unrelated.txt"), b"keep")
    storage.publish(folder, {"a.bin": b"A1", "b.bin": b"B1"}, "dataset.json", '{"v": 1}')
    assert storage.is_published(folder, "dataset.json")
    assert storage.list_files(folder) == ["a.bin", "b.bin", "dataset.json", "unrelated.txt"]

    def failing_writer():  # the producer of the files dies after the first one
        yield "a.bin", b"A2"
        raise RuntimeError("the writer died")

    with pytest.raises(RuntimeError, match="the writer died"):
        storage.publish(folder, failing_writer(), "dataset.json", '{"v": 2}')
    # No marker: readers take the folder as absent (no mix of the old files and the new).
    assert not storage.is_published(folder, "dataset.json")
    assert storage.read_json(storage.join(folder, "dataset.json")) is None
    # What was written before the failure is whole, and the rest of the folder is intact.
    assert storage.read_bytes(storage.join(folder, "a.bin")) == b"A2"
    assert storage.read_bytes(storage.join(folder, "b.bin")) == b"B1"
    assert storage.read_bytes(storage.join(folder, "unrelated.txt")) == b"keep"
    assert storage.list_files(folder) == ["a.bin", "b.bin", "unrelated.txt"]
    # A publish that completes puts the marker back.
    storage.publish(folder, [("a.bin", b"A3")], "dataset.json", '{"v": 3}')
    assert storage.read_json(storage.join(folder, "dataset.json")) == {"v": 3}
    with pytest.raises(ValueError, match="marker"):
        storage.publish(folder, {"dataset.json": "x"}, "dataset.json", "{}")


def check_publish_tree(root, scratch):
    src = os.path.join(scratch, "model")
    os.makedirs(os.path.join(src, "variables"))
    for rel, data in (("saved_model.pb", b"G"), ("variables/v.data", b"D"), ("variables/v.index", b"I")):
        with open(os.path.join(src, rel), "wb") as f:
            f.write(data)
    dst = storage.join(root, "models", "1")
    assert storage.publish_tree(src, dst, "saved_model.pb")[-1] == "saved_model.pb"
    assert storage.is_published(dst, "saved_model.pb") and storage.tree_sha256(dst) == storage.tree_sha256(src)
    with pytest.raises(FileNotFoundError, match="saved_model.pb"):
        storage.publish_tree(os.path.join(src, "variables"), storage.join(root, "models", "2"), "saved_model.pb")
    assert storage.list_files(storage.join(root, "models", "2")) == []


def check_staging(root, scratch):
    folder = storage.join(root, "shards")
    staging = storage.Staging(folder)
    storage.makedirs(folder)
    tmp = staging.path("s-0.tfrecord")
    assert not storage.is_gcs(tmp)  # writers get a local file, whatever the destination
    with open(tmp, "wb") as f:
        f.write(b"records")
    assert "s-0.tfrecord" not in storage.list_files(folder)
    staging.publish([(tmp, "s-0.tfrecord")])
    assert storage.read_bytes(storage.join(folder, "s-0.tfrecord")) == b"records"
    assert not os.path.exists(tmp)
    staging.close()


def test_read_write_local(tmp_path):
    check_read_write(str(tmp_path / "root"), str(tmp_path))


def test_listing_local(tmp_path):
    check_listing(str(tmp_path / "root"), str(tmp_path))


def test_copy_move_delete_local(tmp_path):
    check_copy_move_delete(str(tmp_path / "root"), str(tmp_path))


def test_publish_is_all_or_nothing_local(tmp_path):
    check_publish_is_all_or_nothing(str(tmp_path / "root"), str(tmp_path))


def test_publish_tree_local(tmp_path):
    check_publish_tree(str(tmp_path / "root"), str(tmp_path))


def test_staging_local(tmp_path):
    check_staging(str(tmp_path / "root"), str(tmp_path))


def test_publish_tree_failing_midway_leaves_no_marker(tmp_path):
    src = tmp_path / "model"
    (src / "variables").mkdir(parents=True)
    (src / "variables" / "v.index").write_bytes(b"I")
    (src / "saved_model.pb").write_bytes(b"G")
    (src / "zz.txt").write_bytes(b"Z")
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "variables").write_bytes(b"a file where a folder must go: copying variables/ fails")
    with pytest.raises(OSError):
        storage.publish_tree(str(src), str(dst), "saved_model.pb")
    assert not (dst / "saved_model.pb").exists()
    assert (dst / "variables").read_bytes().startswith(b"a file")


def test_an_interrupted_local_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "f.json"
    storage.write_text(str(path), "old")

    with pytest.raises(TypeError):  # fails inside the write, after the temporary file was opened
        storage.write_bytes(str(path), "text, not bytes")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["f.json"]


def test_staging_removes_leftovers_of_killed_runs(tmp_path):
    staging = storage.Staging(str(tmp_path))
    leftover = staging.path("train-00000-of-00002.tfrecord")
    other = staging.path("test-00000-of-00001.tfrecord")
    for p in (leftover, other):
        open(p, "wb").close()
    (tmp_path / "train-00000-of-00002.tfrecord").write_bytes(b"published")
    assert os.path.basename(leftover).startswith(".")  # hidden next to its real name
    staging.remove_leftovers(["train-00000-of-00002.tfrecord"])
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(other), "train-00000-of-00002.tfrecord"])


def test_join_and_split():
    assert storage.join("gs://b/p/", "x", "/y/") == "gs://b/p/x/y"
    assert storage.join("/", "x") == "/x"
    assert storage.join("", "x") == "x" and storage.join("a", "", "b") == "a/b" and storage.join("/") == "/"
    assert storage.split_gcs("gs://b/a/b/") == ("b", "a/b")
    assert storage.split_gcs("gs://b") == ("b", "")
    with pytest.raises(ValueError, match="bucket"):
        storage.split_gcs("gs:///x")


def test_reset_client_makes_a_new_client(monkeypatch):
    # Anonymous emulator credentials: making a client needs no network and no Google login.
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    storage.reset_client()
    try:
        first = storage.client()
        assert storage.client() is first
        storage.reset_client()
        second = storage.client()
        assert second is not first and storage.client() is second
    finally:
        storage.reset_client()


def _child_client_is(parent_client, conn):
    conn.send(storage.client() is parent_client)


def test_a_forked_child_makes_its_own_client(monkeypatch):
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform (spawned children start without a client anyway)")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    storage.reset_client()
    try:
        ctx = multiprocessing.get_context("fork")
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=_child_client_is, args=(storage.client(), theirs))
        proc.start()
        shared = ours.recv()
        proc.join(timeout=30)
        assert shared is False and proc.exitcode == 0
    finally:
        storage.reset_client()
