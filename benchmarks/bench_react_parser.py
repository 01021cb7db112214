"""Cost of the incremental ReAct parser per delta, and whether it grows linearly.

Feeds replies of 10 KB, 100 KB and 1 MB (a long thought, many actions with long JSON strings, a
long answer) to ``ReactParser`` in 4-character deltas and reports the best of a few repeats: time
per delta, throughput, and the time relative to a baseline consumer that only collects the deltas
(measured in the same run). The last line is time(largest) / time(smallest) / (size ratio):
about 1.0 means the work grows linearly with the reply.

Run:  .venv/bin/python benchmarks/bench_react_parser.py           (about 10 s)
      .venv/bin/python benchmarks/bench_react_parser.py --smoke   (1, 10 and 100 KB; about 1 s)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from agentloop._react_parser import ActionParsed, ReactParser

DELTA = 4


def make_reply(size: int) -> tuple[str, int]:
    """A reply of about ``size`` characters and the number of actions in it."""
    line = 'thinking about {braces} [brackets] "quotes" and Thought: mid-line, café 😀\n'
    value = 'lorem {ipsum} [dolor] \\"sit\\" \\\\ amet\n<|Response|> \\u00e9 ' * 4
    parts = ["Thought: ", line * max(1, size * 3 // 10 // len(line)), "Actions: ```json\n["]
    length = sum(map(len, parts))
    count = 0
    while length < size * 7 // 10:
        obj = (
            f'{{"tag": "t{count}", "name": "n", "path": "p", '
            f'"input": {{"q": "{value}", "n": [1, {{"k": null}}]}}}},\n '
        )
        parts.append(obj)
        length += len(obj)
        count += 1
    parts.append("]\n```\nAnswer: ")
    length += len(parts[-1])
    parts.append(line * max(1, (size - length) // len(line)))
    return "".join(parts), count


def parse_all(deltas: list[str]) -> int:
    parser = ReactParser()
    feed = parser.feed
    sealed = 0
    for delta in deltas:
        for event in feed(delta):
            if type(event) is ActionParsed:
                sealed += 1
    parser.close()
    return sealed


def collect_only(deltas: list[str]) -> int:
    """Baseline: what any consumer pays to receive the deltas."""
    buf: list[str] = []
    append = buf.append
    for delta in deltas:
        append(delta)
    return len("".join(buf))


def best_of(repeats: int, fn: Callable[[list[str]], int], deltas: list[str]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(deltas)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    args_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args_parser.add_argument("--smoke", action="store_true", help="small sizes, one repeat")
    args = args_parser.parse_args(argv)
    sizes = [1_000, 10_000, 100_000] if args.smoke else [10_000, 100_000, 1_000_000]
    repeats = 1 if args.smoke else 5

    print(f"ReAct parser, {DELTA}-character deltas, best of {repeats}\n")
    print("| reply | deltas | actions | time (ms) | µs / delta | MB/s | × baseline |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    times: dict[int, float] = {}
    for size in sizes:
        text, count = make_reply(size)
        deltas = [text[i : i + DELTA] for i in range(0, len(text), DELTA)]
        if parse_all(deltas) != count:
            raise SystemExit(f"parser found the wrong number of actions at {size} characters")
        elapsed = best_of(repeats, parse_all, deltas)
        baseline = best_of(repeats, collect_only, deltas)
        megabytes = len(text.encode()) / 1e6
        times[size] = elapsed
        print(
            f"| {size // 1000} KB | {len(deltas):,} | {count:,} | {elapsed * 1e3:.1f} "
            f"| {elapsed / len(deltas) * 1e6:.2f} | {megabytes / elapsed:.1f} "
            f"| {elapsed / baseline:.0f} |"
        )
    small, large = sizes[0], sizes[-1]
    growth = times[large] / times[small] / (large / small)
    print(
        f"\ntime({large // 1000} KB) / time({small // 1000} KB) / {large // small} = {growth:.2f}"
        "  (1.0 is linear)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
