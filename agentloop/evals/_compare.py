"""``compare(old, new)``: what changed between two reports of the same dataset."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ._report import Report, rate_text


class Change(BaseModel):
    """A pass rate that changed.

    Attributes:
        case: The case.
        evaluator: The evaluator (``None``: the case's overall pass rate).
        old: The old rate (``None``: not scored then).
        new: The new rate (``None``: not scored now).
    """

    case: str
    evaluator: str | None = None
    old: float | None = None
    new: float | None = None

    def describe(self) -> str:
        what = self.case if self.evaluator is None else f"{self.case} / {self.evaluator}"
        return f"{what}: {rate_text(self.old)} -> {rate_text(self.new)}"


class Comparison(BaseModel):
    """Regressions and improvements per case and evaluator, and the change in cost and latency.

    Attributes:
        old: The old report's name.
        new: The new report's name.
        regressions: Pass rates that went down.
        improvements: Pass rates that went up.
        added: Cases only in the new report.
        removed: Cases only in the old report.
        latency_change: The change in mean seconds per run, over the cases in both.
        cost_change: The change in mean cost per run (``None`` unless both are priced).
        pass_rate_change: The change in the share of runs that passed.
    """

    old: str
    new: str
    regressions: list[Change] = Field(default_factory=list)
    improvements: list[Change] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    latency_change: float = 0.0
    cost_change: float | None = None
    pass_rate_change: float = 0.0

    @property
    def regressed(self) -> bool:
        """Any pass rate went down."""
        return bool(self.regressions)

    def render(self) -> str:
        """The comparison as plain text."""
        lines = [
            f"{self.old} -> {self.new}: pass rate {self.pass_rate_change:+.0%}, latency "
            f"{self.latency_change * 1000:+.0f}ms per run"
            + ("" if self.cost_change is None else f", cost {self.cost_change:+.4f} per run")
        ]
        for title, changes in (
            ("regressions", self.regressions),
            ("improvements", self.improvements),
        ):
            if changes:
                lines += [f"{title}:", *(f"  {c.describe()}" for c in changes)]
        if self.added:
            lines.append("new cases: " + ", ".join(self.added))
        if self.removed:
            lines.append("removed cases: " + ", ".join(self.removed))
        return "\n".join(lines) + "\n"


def compare(old: Report, new: Report) -> Comparison:
    """What changed from ``old`` to ``new``, case by case and evaluator by evaluator.

    Args:
        old: The earlier report (``Report.load`` reads a saved one).
        new: The later report.
    """
    before = {c.name: c for c in old.cases}
    after = {c.name: c for c in new.cases}
    both = [name for name in after if name in before]
    result = Comparison(
        old=old.name,
        new=new.name,
        added=[n for n in after if n not in before],
        removed=[n for n in before if n not in after],
        pass_rate_change=new.pass_rate - old.pass_rate,
    )
    evaluators = [*old.evaluators, *(e for e in new.evaluators if e not in old.evaluators)]
    latencies: list[float] = []
    costs: list[float] = []
    for name in both:
        a, b = before[name], after[name]
        rates: list[tuple[str | None, float | None, float | None]] = [
            (None, a.pass_rate, b.pass_rate),
            *((e, a.rate(e), b.rate(e)) for e in evaluators),
        ]
        for evaluator, was, now in rates:
            change = Change(case=name, evaluator=evaluator, old=was, new=now)
            if was is not None and now is not None and now < was:
                result.regressions.append(change)
            elif was is not None and now is not None and now > was:
                result.improvements.append(change)
        latencies.append(b.latency - a.latency)
        if a.cost is not None and b.cost is not None:
            costs.append(b.cost - a.cost)
    result.latency_change = sum(latencies) / len(latencies) if latencies else 0.0
    result.cost_change = sum(costs) / len(costs) if costs else None
    return result
