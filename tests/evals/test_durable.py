"""Evaluating a durable agent on Temporal: each turn of a case is a durable run on a fresh
session of the workers' store (``evals.durable``). Asyncio only (Temporal's SDK)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agentloop import Agent, ModelRequest
from agentloop.cli import main
from agentloop.evals import Case, Contains, Dataset, ToolCallSpec, ToolTrajectory, durable, evaluate
from agentloop.sessions import SQLiteStore
from agentloop.testing import FunctionModel, Reply
from tests.evals.support import last_user, tool_rounds, weather, weather_reply
from tests.support.temporal import import_temporal

import_temporal()
from agentloop.temporal import TemporalAgent, connect, worker  # noqa: E402

pytestmark = [pytest.mark.temporal, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def remembering(request: ModelRequest) -> Reply | str:
    """Weather calls, then an answer that names every user message of the session."""
    if "weather" in last_user(request) and not tool_rounds(request):
        return weather_reply(request)
    users = [m.text for m in request.messages if m.role == "user"]
    return "heard: " + " | ".join(users)


async def test_a_durable_agent_is_evaluated_like_an_in_process_one(
    temporal_target: str, tmp_path: Path
) -> None:
    dataset = Dataset(
        cases=[
            Case(
                name="two turns",
                input="weather in Paris and Rome",
                turns=["thanks"],
                expected_output="heard: weather in Paris and Rome | thanks",
                expected_tools=[
                    ToolCallSpec(name="weather", args={"city": "Paris"}),
                    ToolCallSpec(name="weather"),
                ],
                tags=["tools"],
            ),
            Case(name="other", input="hello", expected_output="heard: hello"),
        ],
        evaluators=[Contains(), ToolTrajectory(mode="in_order", tags=["tools"])],
    )
    async with SQLiteStore(str(tmp_path / "sessions.db")) as store:
        agent = Agent(FunctionModel(remembering), name="durable_eval", tools=[weather], store=store)
        local = await evaluate(agent, dataset, repeat=2)
        served = TemporalAgent(agent, task_queue=f"q-{uuid.uuid4().hex[:8]}")
        client = await connect(temporal_target)
        async with worker(client, [served]):
            report = await evaluate(durable(served, client), dataset, repeat=2, concurrency=4)
    assert local.passed, local.render()
    assert report.passed, report.render()
    # The same pass rates, per case and evaluator, as in process (latency differs).
    assert [r[:4] for r in report.rows()] == [r[:4] for r in local.rows()]
    assert report.rows()[1][:4] == ["two turns", "100%", "100%", "100%"]
    run = report.case("two turns").runs[0]
    assert (run.turns, run.tool_calls) == (2, ["weather", "weather"])


APP = """
from agentloop import Agent
from agentloop.temporal import TemporalAgent
from agentloop.testing import FunctionModel

agent = Agent(FunctionModel(lambda request: "pong"), name="pinger")
durable = TemporalAgent(agent, task_queue={queue!r})
"""


def test_agentloop_eval_runs_the_cases_on_temporal(
    temporal_target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentloop eval --temporal``: the cases run as durable runs, served by an
    ``agentloop worker`` of the same module (a process of its own)."""
    app = tmp_path / "app.py"
    app.write_text(APP.format(queue=f"q-{uuid.uuid4().hex[:8]}"))
    dataset = tmp_path / "ping.json"
    Dataset(
        name="ping",
        cases=[Case(name=f"p{i}", input="ping", expected_output="pong") for i in range(3)],
        evaluators=[Contains()],
    ).save(dataset)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentloop",
            "worker",
            f"{app}:durable",
            "--temporal",
            temporal_target,
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as served:
        try:
            assert served.stderr is not None
            assert "serving" in served.stderr.readline()
            code = main(
                ["eval", str(dataset), "--agent", f"{app}:durable", "--temporal", temporal_target]
            )
        finally:
            served.terminate()
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("ping: 100% of 3 runs passed")
