"""Tracing overhead: CPU per turn with tracing off, beside a build with no tracing code at all.

The baseline is built in this run: a copy of ``agentloop`` whose run path (``_loop``, ``_turn``,
``_run``) has every tracing hook and debug log removed from its syntax tree (statements that
mention the run's instrumentation, the span wrappers or ``logger.debug``). Each variant runs in
a fresh interpreter, interleaved round by round; the least CPU per turn of the rounds is
reported, and the spread of the baseline's rounds is the noise band.

Variants: **no tracing code** (the stripped copy), **tracing off** (``instrument=None``, the
default), **no-op provider** (``instrument`` set, OpenTelemetry's no-op tracer provider), **SDK**
(the OpenTelemetry SDK with an in-memory exporter) and **SDK + content**. The workload is
``bench_core``'s: a two-action step and an answer against ``ScriptedModel``, no latency.

Run: ``python -m benchmarks.bench_tracing [--smoke]``
"""

from __future__ import annotations

import argparse
import ast
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "stripped": "no tracing code",
    "off": "tracing off (default)",
    "noop": "no-op tracer provider",
    "sdk": "SDK, in-memory exporter",
    "content": "SDK + content",
}
HOOKED = ("_loop.py", "_turn.py", "_run.py")
HOOK_NAMES = frozenset(
    {
        "instrument",
        "resolve_instrument",
        "span",
        "timing",
        "traced_run",
        "traced_model_call",
        "tool_span",
        "attempt_failed",
    }
)


# -- the baseline: agentloop with its tracing hooks cut out -------------------------------------


def _is_hook(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.module in ("_tracing", "_instrument")
    if (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "logger.debug"
    ):
        return True
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return False  # a definition is kept; its body is filtered
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return bool(names & HOOK_NAMES)


class _Strip(ast.NodeTransformer):
    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [s for s in body if not _is_hook(s)]
                if not kept and field == "body":
                    kept = [ast.Pass()]
                setattr(node, field, kept)
        return node


def strip_tracing(source: str) -> str:
    tree = ast.fix_missing_locations(_Strip().visit(ast.parse(source)))
    return ast.unparse(tree)


def _identifiers(source: str) -> set[str]:
    """The names and attribute names ``source`` uses (not its strings: ``__slots__`` may name a
    hook's attribute)."""
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return names | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}


def build_baseline(into: Path) -> Path:
    """A copy of the package with the run path's tracing hooks removed; checked, not trusted."""
    target = into / "agentloop"
    into.mkdir()
    shutil.copytree(ROOT / "agentloop", target, ignore=shutil.ignore_patterns("__pycache__"))
    for name in HOOKED:
        stripped = strip_tracing((target / name).read_text())
        left = sorted((HOOK_NAMES - {"span"}) & _identifiers(stripped))
        if left or "logger.debug" in stripped:
            raise RuntimeError(f"{name}: tracing hooks left after stripping: {left}")
        (target / name).write_text(stripped)
    return into


# -- one measurement, in a fresh interpreter -----------------------------------------------------


def _instrument(variant: str, exporter: Any) -> Any:
    from agentloop import Instrumentation

    if variant == "noop":
        from opentelemetry.trace import NoOpTracerProvider

        return Instrumentation(tracer_provider=NoOpTracerProvider())
    if variant in ("sdk", "content"):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return Instrumentation(tracer_provider=provider, include_content=variant == "content")
    return None


def _worker(variant: str, runs: int, backend: str) -> float:
    from agentloop import Agent
    from agentloop.testing import ScriptedModel
    from benchmarks.bench_core import _script, lookup

    exporter: Any = None
    if variant in ("sdk", "content"):
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
    instrument = _instrument(variant, exporter)

    async def many(n: int) -> None:
        for _ in range(n):
            model = ScriptedModel(_script(), chunk_size=8)
            agent = Agent(model, tools=[lookup], instrument=instrument)
            result = await agent.run("look up a and b")
            assert result.output == "A and B"
            if exporter is not None:
                exporter.clear()  # memory stays flat; the spans were made and exported

    anyio.run(many, max(runs // 10, 5), backend=backend)  # warm up
    gc.collect()
    start = time.process_time()
    anyio.run(many, runs, backend=backend)
    return (time.process_time() - start) / (runs * 2)  # two turns per run


def _measure(variant: str, runs: int, backend: str, baseline: Path) -> float:
    env = dict(os.environ)
    path = [str(ROOT)]
    if variant == "stripped":
        path.insert(0, str(baseline))
    env["PYTHONPATH"] = os.pathsep.join(path)
    code = (
        "import json, agentloop, sys; from benchmarks.bench_tracing import _worker; "
        f"print(json.dumps([agentloop.__file__, _worker({variant!r}, {runs}, {backend!r})]))"
    )
    # Run from outside the checkout: ``-c`` puts the working directory first on the path.
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=baseline.parent, env=env
    )
    if out.returncode != 0:
        raise RuntimeError(f"{variant} on {backend} failed:\n{out.stderr[-2000:]}")
    where, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    if (variant == "stripped") != where.startswith(str(baseline)):
        raise RuntimeError(f"{variant} imported agentloop from {where}")
    return float(cpu)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run for CI")
    args = parser.parse_args(argv)
    runs, rounds = (200, 3) if args.smoke else (1500, 5)
    backends = ("asyncio",) if args.smoke else ("asyncio", "trio")
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        baseline = build_baseline(Path(tmp) / "baseline")
        print("| backend | variant | CPU per turn (µs) | vs no tracing code |")
        print("|---|---|---|---|")
        for backend in backends:
            seen: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(rounds):
                for variant in VARIANTS:
                    seen[variant].append(_measure(variant, runs, backend, baseline))
            best = {v: min(cpu) for v, cpu in seen.items()}
            base = best["stripped"]
            for variant, label in VARIANTS.items():
                print(
                    f"| {backend} | {label} | {best[variant] * 1e6:.0f} "
                    f"| {best[variant] / base:.3f}× |"
                )
            noise = max(max(c) / min(c) - 1 for c in (seen["stripped"], seen["off"]))
            delta = best["off"] / base - 1
            verdicts.append(
                f"{backend}: tracing off differs from no tracing code by {delta:+.1%}; "
                f"noise (spread of the rounds) ±{noise:.1%} → "
                f"{'within noise' if abs(delta) <= noise else 'OUTSIDE noise'}"
            )
    print(f"\n{runs} runs of 2 turns per measurement, least of {rounds} interleaved rounds.")
    for verdict in verdicts:
        print(f"\n{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
