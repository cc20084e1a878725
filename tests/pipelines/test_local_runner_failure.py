"""The local runners' skeleton (``pipelines/tools/runner.py``) under kfp.local, on a two-step
pipeline with an exit task and no TensorFlow (about 2 s): its planning step fails, then the exit
task fails for want of the plan. The console names the planning step's own error first and the
exit task's as its consequence, without a traceback; the tool's last lines, the logs and the wall
time follow; the exit status is 1.
"""

import types

from kfp import dsl

from components.images import PROJECT_IMAGE
from pipelines.tools import params
from pipelines.tools.runner import Summary, Tool


# The project's image, as the project's steps: kfp.local warns of it as a step starts (not the step's output).
@dsl.component(base_image=PROJECT_IMAGE)
def plan_probe(stage: str) -> str:
    raise ValueError(f"{stage} serves no model named 'nosuch'; it serves ['classifier', 'detector']")


@dsl.component(base_image=PROJECT_IMAGE)
def join_probe():
    raise FileNotFoundError("no manifest.json under out/: the planning step did not finish (see its log)")


@dsl.pipeline(name="probe-runner")
def probe_pipeline(stage: str = "staging"):
    join = join_probe().set_display_name("Join the shards")
    with dsl.ExitHandler(join, name="probe"):
        plan_probe(stage=stage).set_display_name("Plan the shards")


def test_the_console_names_the_first_cause_and_the_exit_task_s_failure_as_its_consequence(tmp_path, capsys):
    module = types.SimpleNamespace(NAME="probe-runner", pipeline=probe_pipeline)
    seen = []

    def last_lines(done):
        seen.append(done)
        return Summary(["the tool's own line"], ok=True)

    tool = Tool(
        module, "The probe.", lambda args: params.resolve(params.run_form(probe_pipeline), [], "probe"), last_lines
    )
    assert tool.main(["--pipeline-root", str(tmp_path)]) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    cause = "ValueError: staging serves no model named 'nosuch'; it serves ['classifier', 'detector']"
    consequence = "FileNotFoundError: no manifest.json under out/: the planning step did not finish (see its log)"
    assert any(line.startswith("FAILED Plan the shards") and line.endswith(cause) for line in lines), text
    start = lines.index(f"error: step 'Plan the shards' failed: {cause}")
    assert lines[start + 1] == f"then: Join the shards failed as a consequence: {consequence}"
    # its own output is the error alone: not said twice, only where the whole log is
    assert lines[start + 2] == f"The log of 'Plan the shards': {seen[0].folder / 'logs' / 'plan-probe.log'}"
    assert "Traceback" not in text and 'File "' not in text and "RuntimeWarning" not in text
    assert lines[-3:-1] == ["the tool's own line", f"logs:  {seen[0].console.log_dir}/"]
    assert lines[-1].startswith("wall time: ")
    assert (seen[0].folder / "logs" / "plan-probe.log").is_file() and seen[0].failure.step == "Plan the shards"
