"""``agentloop``: command-line entry point (``agentloop demo``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import anyio

from ._demo import run_demo


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentloop", description="An async-native agent runtime.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run an offline demo on a built-in scripted model")
    demo.add_argument("--speed", type=float, default=1.0, help="streaming speed factor")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return anyio.run(run_demo, args.speed)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
