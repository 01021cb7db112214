"""``agentloop eval DATASET --agent module:agent``: run an eval suite, print its report, and
exit 1 when a run failed (or, with ``--compare``, a pass rate went down)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .. import Agent, UserError
from ._setup import load_object, make_model


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalOptions:
    dataset: str
    agent: str
    model: str | None = None
    base_url: str | None = None
    repeat: int = 1
    concurrency: int = 8
    timeout: float | None = 120.0
    tags: tuple[str, ...] = ()
    judge_model: str | None = None
    user_model: str | None = None
    junit: str | None = None
    report: str | None = None
    compare: str | None = None
    temporal: str | None = None
    namespace: str = "default"
    plain: bool = False


async def eval_command(options: EvalOptions) -> int:
    from agentloop import evals

    try:
        dataset = evals.Dataset.load(options.dataset)
        previous = evals.Report.load(options.compare) if options.compare else None
    except FileNotFoundError as exc:
        raise UserError(f"no such file: {exc.filename}") from None
    except ValidationError as exc:
        raise UserError(f"{options.dataset}: {exc}") from None
    if options.tags:
        dataset = dataset.select(tags=options.tags)
    found = load_object(options.agent, option="--agent")
    fancy = not options.plain and sys.stdout.isatty() and _has_rich()
    async with _target(found, options) as target:
        async with _progress(fancy, len(dataset.cases) * options.repeat) as on_run:
            report = await evals.evaluate(
                target,
                dataset,
                concurrency=options.concurrency,
                repeat=options.repeat,
                timeout=options.timeout,
                judge_model=options.judge_model,
                user_model=options.user_model,
                on_run=on_run,
            )
    if fancy:
        report.print()
    else:
        sys.stdout.write(report.render())
    if options.report:
        report.save(options.report)
    if options.junit:
        report.save_junit(options.junit)
    regressed = False
    if previous is not None:
        diff = evals.compare(previous, report)
        sys.stdout.write("\n" + diff.render())
        regressed = diff.regressed
    sys.stdout.flush()
    return 0 if report.passed and not regressed else 1


@contextlib.asynccontextmanager
async def _target(found: Any, options: EvalOptions) -> AsyncGenerator[Any]:
    """The agent (its model replaced with ``--model``), or a durable agent's runs on
    Temporal (``--temporal``)."""
    if type(found).__name__ == "TemporalAgent" and options.temporal is None:
        raise UserError(f"--agent {options.agent} is a TemporalAgent: give --temporal ADDRESS")
    if options.temporal is not None:
        from agentloop import evals
        from agentloop.temporal import TemporalAgent, connect

        if isinstance(found, Agent):
            found = TemporalAgent(found)
        if not isinstance(found, TemporalAgent):
            raise UserError(f"--agent {options.agent} is a {type(found).__name__}, not an Agent")
        if options.model or options.base_url:
            raise UserError("--model: a durable agent runs on its workers' model")
        client = await connect(options.temporal, namespace=options.namespace)
        yield evals.durable(found, client)
        return
    if not isinstance(found, Agent):
        raise UserError(f"--agent {options.agent} is a {type(found).__name__}, not an Agent")
    agent: Agent[Any, Any] = found
    if options.model or options.base_url:
        agent = agent.replace(model=make_model(options.model, base_url=options.base_url))
    async with agent:
        yield agent


@contextlib.asynccontextmanager
async def _progress(fancy: bool, total: int) -> AsyncGenerator[Callable[..., None] | None]:
    """A live progress bar on a terminal (rich), gone once the report prints."""
    if not fancy:
        yield None
        return
    from rich.progress import BarColumn, Progress, TimeElapsedColumn

    failed = 0
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        "{task.completed}/{task.total}",  # MofNCompleteColumn, on rich before 12 too
        TimeElapsedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("evaluating", total=total)

        def advance(case: Any, run: Any) -> None:
            nonlocal failed
            failed += not run.passed
            bar.update(task, advance=1, description=f"evaluating ({failed} failed)")

        yield advance


def _has_rich() -> bool:
    return importlib.util.find_spec("rich") is not None
