"""`vcli mcp`: a real server (`python -m vcli mcp`, its own VCLI_HOME) driven over stdio by the
MCP client library, as an agent drives it: list the tools, run a custom job and a study to
their end, read logs and best trials, cancel a long job, and get vcli's one-line errors as
tool errors. Without the `mcp` extra, `vcli mcp` is one line and exit code 9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.kit import processes_with_env, vcli, vcli_env, wait_for
from vcli.agents.jobs import error_line, tail_lines

PY = sys.executable

JOB = {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                            "containerSpec": {"imageUri": "python:3",
                                              "command": [PY, "-c", "print('hello from mcp'); print('second line')"]}}]}
LONG_JOB = {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                                 "containerSpec": {"imageUri": "python:3",
                                                   "command": [PY, "-c", "import time; print('up', flush=True); "
                                                                         "time.sleep(300)"]}}]}
#: The trial prints its metric (`score=<x>`): the larger x, the better.
TRAINER = "import sys; x = float([a for a in sys.argv if a.startswith('--x=')][0][4:]); print(f'score={x}')"
STUDY = f"""\
displayName: mcp-study
maxTrialCount: 2
parallelTrialCount: 1
studySpec:
  algorithm: RANDOM_SEARCH
  metrics: [{{metricId: score, goal: MAXIMIZE}}]
  parameters:
  - parameterId: x
    doubleValueSpec: {{minValue: 0.0, maxValue: 1.0}}
trialJobSpec:
  workerPoolSpecs:
  - machineSpec: {{machineType: n1-standard-4}}
    replicaCount: 1
    containerSpec:
      imageUri: python:3
      command: [{json.dumps(PY)}, -c, {json.dumps(TRAINER)}]
"""
FINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


class Agent:
    """Calls tools of one session; `call` returns the structured result, `fail` the error text."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def _result(self, name: str, args: dict[str, Any]) -> Any:
        return await self.session.call_tool(name, args, read_timeout_seconds=180)

    async def call(self, name: str, **args: Any) -> dict[str, Any]:
        r = await self._result(name, args)
        text = " ".join(getattr(c, "text", "") for c in r.content)
        assert not r.is_error, f"{name}({args}) failed: {text}"
        data = r.structured_content if r.structured_content is not None else json.loads(text)
        assert isinstance(data, dict), data
        return data

    async def fail(self, name: str, **args: Any) -> str:
        r = await self._result(name, args)
        assert r.is_error, f"{name}({args}) did not fail: {r.content}"
        return " ".join(getattr(c, "text", "") for c in r.content)

    async def until_final(self, tool: str, id_: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            described = await self.call(tool, id=id_)
            if described["state"] in FINAL:
                return described
            assert time.monotonic() < deadline, f"{id_} is still {described['state']} after {timeout}s"
            await anyio.sleep(0.3)


def _serve(home: Path, cwd: Path, scenario: Any, *, write: bool = True) -> None:
    """Start `python -m vcli mcp [--allow-write]` with `home`, run `scenario(agent)` in a session with it."""
    params = StdioServerParameters(command=PY, args=["-m", "vcli", "mcp", *(["--allow-write"] if write else [])],
                                  env=vcli_env(home, VCLI_LOCAL_GPUS="2"), cwd=str(cwd))

    async def main() -> None:
        with open(home.parent / "server.err", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await scenario(Agent(session))

    anyio.run(main)


def test_an_agent_runs_jobs_and_studies_through_vcli_mcp(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ids: dict[str, str] = {}

    async def scenario(agent: Agent) -> None:
        tools = {t.name: t for t in (await agent.session.list_tools()).tools}
        assert set(tools) == {"list_custom_jobs", "describe_custom_job", "create_custom_job", "cancel_custom_job",
                              "job_logs", "list_hp_tuning_jobs", "describe_hp_tuning_job", "create_hp_tuning_job",
                              "cancel_hp_tuning_job", "best_trials", "hosts_gpus", "validate_custom_job",
                              "validate_hp_tuning_job"}
        assert tools["create_custom_job"].input_schema["required"] == ["display_name"]
        assert tools["describe_hp_tuning_job"].input_schema["properties"]["trials"]["enum"] == ["count", "all", "none"]
        assert "background" in (tools["create_custom_job"].description or "")
        assert (await agent.call("list_custom_jobs")) == {"customJobs": []}

        # A custom job: create returns at once, describe follows it to its end, logs read it.
        created = await agent.call("create_custom_job", display_name="mcp-job", config_yaml=json.dumps(JOB),
                                   executor="local")
        ids["job"] = job = created["id"]
        assert created["displayName"] == "mcp-job" and created["state"] not in FINAL[1:]
        done = await agent.until_final("describe_custom_job", job)
        assert done["state"] == "JOB_STATE_SUCCEEDED", done
        assert done["replicas"][0]["exitCode"] == 0
        logs = await agent.call("job_logs", id=job, lines=1)
        assert logs["ended"] is True and len(logs["lines"]) == 1
        full = await agent.call("job_logs", id=job)
        messages = [line.split("\t")[3] for line in full["lines"]]
        assert messages[:2] == ["hello from mcp", "second line"], full
        assert all(line.split("\t")[2] == "workerpool0-0" for line in full["lines"])
        listed = await agent.call("list_custom_jobs", filter="displayName=mcp-job")
        assert [j["id"] for j in listed["customJobs"]] == [job]

        # A study of two random trials, each printing its metric; its best trials, best first.
        study = await agent.call("create_hp_tuning_job", config_yaml=STUDY, seed=3, executor="local")
        ids["study"] = sid = study["id"]
        assert study["displayName"] == "mcp-study" and study["maxTrialCount"] == 2
        ended = await agent.until_final("describe_hp_tuning_job", sid)
        assert ended["state"] == "JOB_STATE_SUCCEEDED", ended
        assert ended["trialCount"] == 2 and ended["trialStates"] == {"SUCCEEDED": 2} and "trials" not in ended
        whole = await agent.call("describe_hp_tuning_job", id=sid, trials="all")
        scores = {t["id"]: t["finalMeasurement"]["metrics"][0]["value"] for t in whole["trials"]}
        best = await agent.call("best_trials", id=sid, n=2)
        assert [t["id"] for t in best["trials"]] == sorted(scores, key=scores.__getitem__, reverse=True)
        assert best["trials"][0]["id"] == best["bestTrialId"] == whole["bestTrialId"]
        assert set(best["trials"][0]["parameters"][0]) == {"parameterId", "value"}
        study_logs = await agent.call("job_logs", id=sid)
        assert {line.split("\t")[2] for line in study_logs["lines"]} == {f"trial-{t}/workerpool0-0" for t in scores}
        again = await agent.call("cancel_hp_tuning_job", id=sid, wait=False)  # it has ended: left as it is
        assert again["state"] == "JOB_STATE_SUCCEEDED" and "has already ended" in " ".join(again["messages"]), again
        studies = await agent.call("list_hp_tuning_jobs")
        assert [(s["id"], s["trialCount"]) for s in studies["hyperparameterTuningJobs"]] == [(sid, 2)]

        # A long job, cancelled: it ends CANCELLED, its replica stopped.
        long = await agent.call("create_custom_job", display_name="mcp-long", config_yaml=json.dumps(LONG_JOB),
                                executor="local")
        ids["long"] = long["id"]
        for _ in range(100):
            if any("up" in line for line in (await agent.call("job_logs", id=long["id"]))["lines"]):
                break
            await anyio.sleep(0.2)
        cancelled = await agent.call("cancel_custom_job", id=long["id"])
        assert cancelled["state"] == "JOB_STATE_CANCELLED", cancelled
        assert (await agent.call("describe_custom_job", id=long["id"]))["state"] == "JOB_STATE_CANCELLED"
        newest = await agent.call("list_custom_jobs", limit=1)
        assert [j["id"] for j in newest["customJobs"]] == [long["id"]]

        # vcli's own one-line errors, as tool errors.
        assert await agent.fail("describe_custom_job", id="nosuchjob") == (
            "CustomJob [nosuchjob] was not found. List jobs with `vcli custom-jobs list`.")
        assert "HyperparameterTuningJob [nosuchstudy] was not found" in await agent.fail("best_trials", id="nosuchstudy")
        assert "was not found" in await agent.fail("cancel_hp_tuning_job", id=job)  # a custom job is no study
        assert "No custom job or hyperparameter tuning job [nope]" in await agent.fail("job_logs", id="nope")
        assert "At least one of (--config | --worker-pool-spec)" in await agent.fail("create_custom_job", display_name="x")
        bad = await agent.fail("create_hp_tuning_job", config_yaml="studySpec: [1, 2]\n")
        assert bad and "Traceback" not in bad and "\n" not in bad
        gpus = (await agent.call("hosts_gpus"))["gpus"]  # the server's VCLI_LOCAL_GPUS=2
        assert [(g["host"], g["gpu"], g["state"]) for g in gpus] == [("local", 0, "FREE"), ("local", 1, "FREE")], gpus

    _serve(home, tmp_path, scenario)
    # The server is gone, and so is every process it or its jobs started: the detached runners
    # ended with their jobs, the cancelled job's replica with its cancel.
    assert processes_with_env("VCLI_JOB_ID", ids["long"]) == [], (home.parent / "server.err").read_text()[-3000:]
    wait_for(lambda: not processes_with_env("VCLI_HOME", str(home)), 15, "every process of the server's home to end")
    described = json.loads(vcli(home, "custom-jobs", "describe", ids["job"], "--format=json").stdout)
    assert described["state"] == "JOB_STATE_SUCCEEDED"


def test_without_allow_write_the_server_only_reads_and_validates(tmp_path: Path) -> None:
    """`vcli mcp` alone serves no tool that creates or cancels; `validate_custom_job` resolves a
    job without recording it, and names a mistake in one line."""
    home = tmp_path / "home"

    async def scenario(agent: Agent) -> None:
        tools = {t.name for t in (await agent.session.list_tools()).tools}
        assert not {t for t in tools if t.startswith(("create_", "cancel_"))}, tools
        assert {"validate_custom_job", "validate_hp_tuning_job", "describe_custom_job", "job_logs"} <= tools
        checked = await agent.call("validate_custom_job", display_name="v", config_yaml=json.dumps(JOB))
        assert checked["valid"] is True and checked["customJob"]["displayName"] == "v"
        assert (await agent.call("list_custom_jobs")) == {"customJobs": []}  # nothing recorded
        said = await agent.fail("validate_custom_job", display_name="v", config_yaml="workerPoolSpecs: 3")
        assert "workerPoolSpecs" in said and "\n" not in said.strip()

    _serve(home, tmp_path, scenario, write=False)


def test_without_the_mcp_extra_vcli_mcp_is_one_line_and_exit_9(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "mcp.py").write_text("raise ImportError('mcp is not installed here')\n")
    env = vcli_env(tmp_path / "home")
    r = vcli(tmp_path / "home", "mcp", PYTHONPATH=os.pathsep.join([str(blocked), env["PYTHONPATH"]]), timeout=60)
    assert r.returncode == 9, r.stderr
    assert r.stderr == (f"ERROR: (vcli.mcp) vcli mcp needs the MCP Python SDK (2.x), which the [mcp] extra installs: "
                        f"{PY} -m pip install 'vcli[mcp]'\n")
    assert r.stdout == ""


def test_log_tails_read_whole_records_from_the_end(tmp_path: Path) -> None:
    log = tmp_path / "log"
    assert tail_lines(str(log), 5) == []
    records = [f"{1700000000 + i}.0\tstdout\tline {i} " + "x" * (i % 300) for i in range(3000)]
    log.write_text("\n".join(records) + "\n1700009999.0\tstdout\tstill being writ")
    assert tail_lines(str(log), 3) == records[-3:]
    assert tail_lines(str(log), 5000) == records


def test_a_failed_command_is_its_error_line() -> None:
    stderr = "Note: something.\nERROR: (vcli.custom-jobs.create) Invalid value for [--config]: bad.\n"
    assert error_line(stderr, 1) == "Invalid value for [--config]: bad."
    assert error_line("Traceback...\nKeyError: 'x'\n", 70) == "KeyError: 'x'"
    assert error_line("", 3) == "vcli exited with code 3."


def test_vcli_mcp_help_imports_neither_the_sdk_nor_pydantic(tmp_path: Path) -> None:
    probe = ("import sys; sys.argv = ['vcli', 'mcp', '--help']\nfrom vcli.cli import app\ntry:\n    app()\n"
             "except SystemExit:\n    pass\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'pydantic', 'anyio'}))")
    r = subprocess.run([PY, "-c", probe], env=vcli_env(tmp_path / "home"), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.stdout.startswith("Usage: vcli mcp"), r.stderr
    assert r.stdout.splitlines()[-1] == "[]", r.stdout
