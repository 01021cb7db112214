"""Run every benchmark: ``python -m benchmarks [--smoke] [--only NAME] [--no-write]``.

Each ``bench_*.py`` module prints a markdown table. Without ``--no-write`` the results are
written into ``benchmarks/README.md`` between the results markers: the machine and the command
first, then one section per benchmark (its title, its own command, its table). With ``--only``
the sections run replace theirs, marked with the day they were run on their own, and the
others stay.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import pkgutil
import platform
import sys
import time
from pathlib import Path

from benchmarks import _loopback

HERE = Path(__file__).parent
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def _machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--smoke", action="store_true", help="small, quick versions (CI)")
    parser.add_argument("--only", action="append", default=[], help="run only these (e.g. core)")
    parser.add_argument("--no-write", action="store_true", help="do not update README.md")
    args = parser.parse_args(argv)
    names = sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules([str(HERE)])
        if m.name.startswith("bench_")
    )
    if args.only:
        names = [n for n in names if n in args.only]
    sections: list[str] = []
    failed = 0
    flag = " --smoke" if args.smoke else ""
    for name in names:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        out = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out):
            code = module.main(["--smoke"] if args.smoke else [])
        took = time.perf_counter() - start
        failed += code != 0
        text = _strip_heading(out.getvalue().strip())
        if ran := _loopback.paths_ran():
            text += f"\n\n{ran}"
        _loopback.PATHS.clear()
        title = (module.__doc__ or name).strip().splitlines()[0].rstrip(".")
        section = (
            f"### {title}\n\nCommand: `python -m benchmarks.bench_{name}{flag}` "
            f"({took:.0f} s{'' if code == 0 else f', exit {code}'})\n\n{text}"
        )
        print(f"{section}\n", flush=True)
        sections.append(section)
    if not args.no_write:
        _write(sections, "python -m benchmarks" + flag, partial=bool(args.only))
    return 1 if failed else 0


def _write(sections: list[str], command: str, *, partial: bool) -> None:
    """The results into ``README.md`` between the markers. With ``--only``, the sections run
    replace their earlier selves (and say when they were measured); the others stay."""
    readme = HERE / "README.md"
    text = readme.read_text() if readme.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN)
    old, _, tail = rest.partition(END)
    if partial:
        today = time.strftime("%Y-%m-%d")
        fresh = {_title(s): _dated(s, today) for s in sections}
        first, *others = old.strip().split("\n### ")
        kept = [fresh.pop(_title("### " + o), "### " + o) for o in others]
        body = "\n\n".join(p.strip() for p in [first, *kept, *fresh.values()])
    else:
        measured = f"Measured {time.strftime('%Y-%m-%d')} on {_machine()}."
        body = "\n\n".join([measured, f"Command: `{command}`", *sections])
    readme.write_text(f"{head}{BEGIN}\n{body}\n{END}{tail}")


def _title(section: str) -> str:
    return section.partition("\n")[0]


def _dated(section: str, today: str) -> str:
    """A section measured apart from the full run says when: ``(470 s, run on its own on ...)``."""
    title, _, rest = section.partition("\n\nCommand: ")
    command, _, table = rest.partition("\n\n")
    command = command.replace(")", f", run on its own on {today})", 1)
    return f"{title}\n\nCommand: {command}\n\n{table}"


def _strip_heading(text: str) -> str:
    """A benchmark's own heading line, if it prints one (the section has its title)."""
    first, _, rest = text.partition("\n")
    return rest.strip() if first.startswith("#") else text


if __name__ == "__main__":
    sys.exit(main())
