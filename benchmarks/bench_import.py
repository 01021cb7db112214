"""Import time of ``agentloop``, and which heavy packages it pulls in.

Each measurement is a fresh interpreter timing ``import agentloop`` alone (``perf_counter`` around
the import statement, so interpreter start-up is not counted); the median of several is reported,
with the fastest and slowest. A provider SDK must not be imported until a driver for it is used:
the same fresh interpreter reports which of ``openai``, ``anthropic``, ``httpx2``, ``aiohttp``,
``jinja2``, ``tenacity`` and ``pydantic`` ended up in ``sys.modules``. Target: under 0.3 s.

Run: ``python -m benchmarks.bench_import [--smoke] [--runs 15]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from benchmarks._bytecode import cached_bytecode

TARGET = 0.3
HEAVY = ("openai", "anthropic", "httpx2", "aiohttp", "jinja2", "tenacity", "pydantic")
SDKS = ("openai", "anthropic", "httpx2", "aiohttp")
_PROBE = (
    "import sys, time, json; t = time.perf_counter(); import agentloop; "
    "took = time.perf_counter() - t; "
    f"print(json.dumps([took, [m for m in {HEAVY!r} if m in sys.modules]]))"
)


def probe() -> tuple[float, list[str]]:
    """One fresh interpreter: seconds to import agentloop, and the heavy packages it imported."""
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    took, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    return float(took), list(loaded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_import")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    runs = args.runs or (5 if args.smoke else 15)
    with cached_bytecode():
        probe()  # warm the file cache and bytecode
        results = [probe() for _ in range(runs)]
    times = sorted(t for t, _ in results)
    loaded = results[-1][1]
    median = statistics.median(times)
    sdks = [m for m in loaded if m in SDKS]
    print("| measure | value |")
    print("|---|---:|")
    print(f"| `import agentloop`, median of {runs} | {median:.3f} s |")
    print(f"| fastest / slowest | {times[0]:.3f} s / {times[-1]:.3f} s |")
    print(f"| heavy packages imported | {', '.join(loaded) or 'none'} |")
    print(f"| provider SDKs imported | {', '.join(sdks) or 'none'} |")
    ok = median < TARGET and not sdks
    print(
        f"\nTarget: under {TARGET} s with no provider SDK imported: {'met' if ok else 'NOT met'}."
    )
    return 0 if not sdks else 1


if __name__ == "__main__":
    sys.exit(main())
