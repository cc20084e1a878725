"""The search pipeline: one fan-out per rung with a selection between them over the collected rows,
the join as the exit task, the rungs and parallelism compiled in, presets; a small search run under
kfp.local as ``make search`` runs it (slow), its frontier page opened in Chromium."""

import json
import re
from pathlib import Path

import pytest
import yaml
from kfp import compiler

from pipelines import search
from pipelines.tools import compile as compile_module


def _compiled(tmp_path, func):
    path = tmp_path / "s.yaml"
    compiler.Compiler().compile(func, str(path))
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs[0], (docs[1] if len(docs) > 1 else {})


def test_each_rung_is_a_fan_out_a_selection_reads_the_collected_rows_and_the_join_is_the_exit_task(tmp_path):
    spec, platform = _compiled(tmp_path, search.build(parallelism=3, rungs=3))
    body = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    loops = sorted(t for t in body if t.startswith("for-loop-"))
    assert len(loops) == 3 and [body[t]["iteratorPolicy"]["parallelismLimit"] for t in loops] == [3, 3, 3]
    assert body[loops[0]]["parameterIterator"]["items"]["inputParameter"] == "pipelinechannel--plan-search-Output"
    selections = sorted(t for t in body if t.startswith("select-search-rung"))
    assert len(selections) == 2  # between the rungs, none after the last
    for name in selections:
        assert body[name]["cachingOptions"] == {}  # never from KFP's cache: it reads the rows
        rows = body[name]["inputs"]["parameters"]["rows"]
        assert rows["taskOutputParameter"]["producerTask"].startswith("for-loop-")  # dsl.Collected
    assert body[loops[1]]["parameterIterator"]["items"]["inputParameter"].startswith("pipelinechannel--select-search")
    join = spec["root"]["dag"]["tasks"]["join-search"]
    assert join["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED" and join["cachingOptions"] == {}
    trial = spec["deploymentSpec"]["executors"]["exec-train-search-trial"]["container"]["resources"]
    assert trial["accelerator"]["resourceType"] == "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}"
    names = {c["dag"]["tasks"][t]["taskInfo"]["name"] for c in spec["components"].values() if "dag" in c
             for t in c["dag"]["tasks"] if t.startswith("train-search-trial")}  # fmt: skip
    assert names == {"Rung 0: train a trial", "Rung 1: train a trial", "Rung 2: train a trial"}
    env = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-search-trial"]
    assert {f["name"] for f in env["fieldPathAsEnv"]} >= {"LTP_POD_NAME", "LTP_POD_UID"}


def test_a_preset_gives_every_trial_its_node_selectors_and_the_rungs_come_from_make_compile(tmp_path, monkeypatch):
    _, platform = _compiled(tmp_path, search.build(2, rungs=2, preset="gke-tpu-v5e-2x4"))
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-search-trial"]
    assert k8s["nodeSelector"]["labels"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
    assert compile_module.main(["--output-dir", str(tmp_path), "--search-rungs", "2", "search"]) == 0
    assert len(re.findall(r"^  comp-for-loop-\d+:", (tmp_path / "search.yaml").read_text(), re.M)) == 2
    monkeypatch.setenv(search.RUNGS_ENV, "0")
    assert compile_module.main(["--output-dir", str(tmp_path), "search"]) == 2


@pytest.mark.slow
def test_make_search_runs_the_rungs_under_kfp_local_and_a_failed_trial_is_a_row(tmp_path, capsys):
    from pipelines.tools import run_search

    # Four trials on 100 digits per split, budgets in steps (3, then 12): one goes on; the
    # trial naming a model nobody registered fails in its training, a failed row, and the search goes on.
    spec = {
        "space": {"model": ["mnist_cnn", "no_such_model"], "learning_rate": [0.003, 0.0003]},
        "sampling": "grid",
        "rungs": 2,
        "eta": 4,
        "max_budget": "12 steps",
        "objective": "frontier",
        "metric": "accuracy",
        "fixed": {"accelerator": "cpu"},
    }
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(spec))
    code = run_search.main(["--search", str(path), "--set", "limit_per_split=100", "--pipeline-root", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    for step in ("Convert to TFRecords", "Plan the search", "Rung 0: train a trial", "Select after rung 0",
                 "Rung 1: train a trial", "Frontier"):  # fmt: skip
        assert f"ok {step}" in out
    (folder,) = tmp_path.glob("sweep-rows/search-*")
    record = json.loads((folder / "search.json").read_text())
    trials = {t["name"].split(" ", 1)[1]: t for t in record["trials"]}
    assert record["complete"] and record["reached_rung"] == 1
    failed = [t for t in trials.values() if t["status"] == "failed"]
    assert len(failed) == 2 and all("no_such_model" in t["reason"] and t["rung"] == 0 for t in failed)
    finished = [t for t in trials.values() if t["status"] == "ok"]
    assert sorted(t["rung"] for t in finished) == [0, 1] and {t["steps"] for t in finished} == {3, 12}
    for t in finished:
        assert t["seconds"] > t["startup_s"] > 0 and t["cost"] > 0 and 0 <= t["quality"] <= 1
    # The pick is the best quality on the frontier (a trial stopped at rung 0 may hold it), with its model.
    chosen = next(t for t in finished if t["key"] == record["choice"]["key"])
    assert chosen["quality"] == max(t["quality"] for t in finished)
    assert record["choice"]["model_uri"] == chosen["model_uri"] and (Path(chosen["model_uri"]) / "model.keras").exists()
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert (best["epochs"], best["steps_per_epoch"]) == (4, 3)  # each rung ends on an evaluation
    assert record["savings"]["spent_s"] < record["savings"]["full_s"]
    assert f"make run CONFIG={folder}/best.yaml" in out and "| trial | rung reached |" in out

    (chart,) = tmp_path.glob("search-*/join-search/chart")
    results = chart.parent.parent / "search.html"  # make search says where its results page is
    assert f"results page: {results}" in out and results.read_bytes() == chart.read_bytes()
    page = tmp_path / "frontier.html"  # the artifact has no extension: served as a page, as the UI does
    page.write_bytes(chart.read_bytes())
    _frontier_page_draws_both_charts(page, tmp_path)


def _frontier_page_draws_both_charts(page, tmp_path):
    from tests.browser import Browser, chromium_path

    if chromium_path() is None:
        pytest.fail("chromium is missing: run 'make browser' (Debian package chromium)")
    with Browser(width=1000, height=800) as browser:
        browser.open(page)
        shot = browser.screenshot(tmp_path / "frontier.png", full_page=True, scale=0.5)
        charts = browser.evaluate("[...document.querySelectorAll('svg.chart')].map(s => s.getAttribute('aria-label'))")
        drawn = browser.evaluate("[...document.querySelectorAll('svg.chart')].map(s => s.getBBox().width > 100)")
        text = browser.evaluate("document.body.innerText")
    assert [m for m in browser.console if m["type"] in ("error", "exception", "assert")] == []
    assert [u for u in browser.requests if not u.startswith(("file:", "data:"))] == []
    assert shot.stat().st_size > 5_000 and drawn == [True, True], charts
    assert charts == ["accuracy against cost ($)", "accuracy against billed seconds"]
    assert "Pick:" in text and "failed" in text
