"""The outcome of ``evaluate``: a typed ``Report``, its table, JSON and JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from ._result import EvalResult

if TYPE_CHECKING:
    from ._context import EvalContext

_REASON = 500  # characters of a failure's reason kept in a report


class CaseRun(BaseModel):
    """One run of a case: what it did and what each evaluator said.

    Attributes:
        repetition: Which repetition, from 0.
        passed: No error, and every evaluator that applied passed.
        error: Why the run did not finish (it raised, or timed out); then no evaluator ran.
        output: The last turn's output, as JSON.
        text: The last turn's answer text.
        results: Each evaluator's result (skipped ones left out).
        latency: Seconds, all turns.
        cost: The runs' cost (``None`` when not priced).
        turns: User messages sent.
        steps: Steps, all turns.
        requests: Model requests, all turns.
        input_tokens: Input tokens, all turns.
        output_tokens: Output tokens, all turns.
        tool_calls: The names of the tools called, in the model's order.
    """

    model_config = ConfigDict(frozen=True)

    repetition: int = 0
    passed: bool
    error: str | None = None
    output: Any = None
    text: str | None = None
    results: list[EvalResult] = Field(default_factory=list)
    latency: float = 0.0
    cost: float | None = None
    turns: int = 0
    steps: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, ctx: EvalContext, results: list[EvalResult], error: str | None) -> CaseRun:
        """The record of a scored run.

        Args:
            ctx: The run.
            results: Its evaluators' results.
            error: Why it did not finish, if it did not.
        """
        usage = ctx.usage
        return cls(
            repetition=ctx.repetition,
            passed=error is None and all(r.passed for r in results),
            error=error,
            output=to_jsonable_python(ctx.output, fallback=repr),
            text=ctx.result.text if ctx.result is not None else None,
            results=[_short(r) for r in results],
            latency=ctx.latency,
            cost=ctx.cost,
            turns=len(ctx.results),
            steps=len(ctx.steps),
            requests=usage.requests,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            tool_calls=[c.name for c in ctx.tool_calls],
        )


def _short(result: EvalResult) -> EvalResult:
    reason = result.reason
    if reason is None or len(reason) <= _REASON:
        return result
    return result.model_copy(update={"reason": reason[: _REASON - 1] + "…"})


class CaseReport(BaseModel):
    """A case's runs.

    Attributes:
        name: The case's name.
        tags: Its tags.
        runs: Each run, by repetition.
    """

    name: str
    tags: list[str] = Field(default_factory=list)
    runs: list[CaseRun] = Field(default_factory=list)

    @property
    def pass_rate(self) -> float:
        """The share of runs that passed."""
        return sum(r.passed for r in self.runs) / len(self.runs) if self.runs else 0.0

    @property
    def latency(self) -> float:
        """Mean seconds per run."""
        return fmean(r.latency for r in self.runs) if self.runs else 0.0

    @property
    def cost(self) -> float | None:
        """Mean cost per run (``None`` when not priced)."""
        costs = [r.cost for r in self.runs if r.cost is not None]
        return fmean(costs) if costs else None

    def rate(self, evaluator: str) -> float | None:
        """The share of runs an evaluator passed (``None``: it scored none of them).

        Args:
            evaluator: The evaluator's name.
        """
        said = [x.passed for r in self.runs for x in r.results if x.name == evaluator]
        return sum(said) / len(said) if said else None

    def errors(self) -> list[str]:
        """Why runs failed: their errors and failed evaluators' reasons, each once."""
        found: list[str] = []
        for run in self.runs:
            lines = [run.error] if run.error else []
            lines += [f"{x.name}: {x.reason or 'failed'}" for x in run.results if not x.passed]
            found += [line for line in lines if line not in found]
        return found


class Report(BaseModel):
    """What ``evaluate`` found: per case and evaluator, pass rates, cost and latency.

    ``print()`` shows the table (with rich when installed), ``save``/``load`` keep it as JSON
    for ``compare``, ``junit_xml()`` is for CI systems.

    Attributes:
        name: The report's name.
        dataset: The dataset's name.
        started_at: When the evaluation started (ISO 8601, UTC).
        duration: Seconds it took.
        repeat: Runs per case.
        evaluators: The evaluators' names, in order.
        cases: Each case's runs.
    """

    name: str
    dataset: str
    started_at: str = ""
    duration: float = 0.0
    repeat: int = 1
    evaluators: list[str] = Field(default_factory=list)
    cases: list[CaseReport] = Field(default_factory=list)

    @property
    def runs(self) -> int:
        return sum(len(c.runs) for c in self.cases)

    @property
    def pass_rate(self) -> float:
        """The share of all runs that passed."""
        runs = self.runs
        return sum(r.passed for c in self.cases for r in c.runs) / runs if runs else 0.0

    @property
    def passed(self) -> bool:
        """Every run of every case passed."""
        return all(r.passed for c in self.cases for r in c.runs)

    def case(self, name: str) -> CaseReport:
        """The report of one case.

        Args:
            name: The case's name.
        """
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(name)

    def rows(self) -> list[list[str]]:
        """The table: a header, a row per case, and a total."""
        header = ["case", "pass", *self.evaluators, "latency", "cost"]
        rows = [header]
        for c in self.cases:
            rates = [rate_text(c.rate(e)) for e in self.evaluators]
            rows.append(
                [c.name, rate_text(c.pass_rate), *rates, _seconds(c.latency), _cost(c.cost)]
            )
        latency = fmean(r.latency for c in self.cases for r in c.runs) if self.runs else 0.0
        costs = [c.cost for c in self.cases if c.cost is not None]
        totals = [rate_text(_mean([c.rate(e) for c in self.cases])) for e in self.evaluators]
        rows.append(
            [
                "all",
                rate_text(self.pass_rate),
                *totals,
                _seconds(latency),
                _cost(fmean(costs) if costs else None),
            ]
        )
        return rows

    def render(self) -> str:
        """The table as plain text, then each failure's reason."""
        rows = self.rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
            for row in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.insert(len(lines) - 1, lines[1])
        title = f"{self.name}: {self.pass_rate:.0%} of {self.runs} runs passed"
        return "\n".join([title, "", *lines, *self._failures()]) + "\n"

    def _failures(self) -> list[str]:
        out: list[str] = []
        for c in self.cases:
            errors = c.errors()
            if errors:
                out += ["", f"{c.name}:", *(f"  {e}" for e in errors)]
        return out

    def print(self, console: Any = None) -> None:
        """Print the table: with rich when it is installed (``console``: a ``rich`` Console),
        else as plain text.

        Args:
            console: The rich ``Console`` to print to (default: a new one on stdout).
        """
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            print(self.render(), end="")
            return
        rows = self.rows()
        table = Table(title=f"{self.name}: {self.pass_rate:.0%} of {self.runs} runs passed")
        for i, head in enumerate(rows[0]):
            table.add_column(head, justify="left" if i == 0 else "right")
        body = rows[1:-1]
        for i, row in enumerate(body):  # the total below a rule (end_section: rich 10 has it)
            end = i == len(body) - 1
            table.add_row(*row, style=None if row[1] == "100%" else "red", end_section=end)
        table.add_row(*rows[-1], style="bold")
        out = console or Console()
        out.print(table)
        failures = self._failures()
        if failures:
            out.print("\n".join(failures), markup=False, highlight=False)

    def save(self, path: str | Path) -> None:
        """Write the report as JSON (for ``Report.load`` and ``compare``).

        Args:
            path: The file.
        """
        Path(path).write_text(self.model_dump_json(indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Report:
        """Read a report ``save`` wrote.

        Args:
            path: The file.
        """
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def junit_xml(self) -> str:
        """The report as JUnit XML: a test case per case, failing unless every run passed."""
        failures = sum(1 for c in self.cases if c.pass_rate < 1.0)
        suite = ET.Element(
            "testsuite",
            name=self.name,
            tests=str(len(self.cases)),
            failures=str(failures),
            errors="0",
            time=f"{self.duration:.3f}",
            timestamp=self.started_at,
        )
        for c in self.cases:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=self.dataset,
                name=c.name,
                time=f"{sum(r.latency for r in c.runs):.3f}",
            )
            if c.pass_rate < 1.0:
                passed = sum(r.passed for r in c.runs)
                failure = ET.SubElement(
                    case, "failure", message=f"passed {passed} of {len(c.runs)} runs"
                )
                failure.text = "\n".join(c.errors())
        root = ET.Element("testsuites", name=self.name)
        root.append(suite)
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

    def save_junit(self, path: str | Path) -> None:
        """Write ``junit_xml()`` to a file.

        Args:
            path: The file.
        """
        Path(path).write_text(self.junit_xml(), encoding="utf-8")

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-compatible data."""
        return self.model_dump(mode="json")


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return fmean(known) if known else None


def rate_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _cost(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
