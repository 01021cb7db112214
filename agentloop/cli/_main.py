"""``agentloop``: the command line (``demo``, ``run``, ``chat``, ``emulate``, ``serve``,
``worker``, ``eval``).

Errors are one line on stderr, never a traceback (``AGENTLOOP_DEBUG=1`` shows it): exit status 2
for a mistake in what was asked (a bad model string, tool path or store URL, a missing key), 1
for a run that failed or ended without an answer, 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from .. import AgentLoopError, UserError
from ._interrupt import INTERRUPTED, ProgramEnd, run_interruptibly, say_interrupted

DEBUG_ENV = "AGENTLOOP_DEBUG"
DEFAULT_EMULATE_PORT = 8765

EPILOG = """\
exit status: 0 answered · 1 the run failed or ended without an answer · 2 a usage or
configuration error · 130 interrupted. Set AGENTLOOP_DEBUG=1 to see tracebacks.
"""


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="agentloop",
        description="An async-native agent runtime: try it offline with `agentloop demo`.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"agentloop {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="watch the loop work, offline, on a built-in scripted model",
        description="Streams thoughts, starts tools while the reply still streams, shows a goal "
        "interception withdrawing a draft, and ends with a timing summary. Offline.",
    )
    demo.add_argument(
        "--speed", type=_positive, default=1.0, help="replay speed factor (2 = twice as fast)"
    )
    _output_options(demo)

    run = commands.add_parser(
        "run",
        help="run one prompt against a model",
        description="Run one prompt and show the run live (or as JSON lines with --json).",
        epilog=EPILOG,
    )
    run.add_argument("prompt", help="what to ask")
    _agent_options(run)
    run.add_argument("--goal", metavar="OBJECTIVE", help="give the session this goal first")
    _session_options(run)
    _output_options(run, quiet=True)

    chat = commands.add_parser(
        "chat",
        help="an interactive conversation kept in a session store",
        description="Reads lines from stdin; each is a run of one session, which remembers the "
        "earlier turns. Commands: /goal OBJECTIVE, /goal, /exit.",
        epilog=EPILOG,
    )
    _agent_options(chat)
    _session_options(chat, default_store="a SQLite file in the user data dir")
    _output_options(chat)

    emulate = commands.add_parser(
        "emulate",
        help="serve an emulated model provider on a local port (offline, no key)",
        description="Serves the emulated provider: OpenAI Chat Completions and Responses "
        "(base URL http://HOST:PORT/v1) and Anthropic Messages (http://HOST:PORT), streamed or "
        "not. Without a script it answers with two parallel tool calls (arguments made up "
        "from each tool's JSON schema), then, after the results, a text (to a request without "
        "tools, a text saying none was offered). Prints where it "
        "listens and one line per request; runs until Ctrl-C (exit status 0).",
    )
    emulate.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    emulate.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_EMULATE_PORT,
        help=f"the port (default {DEFAULT_EMULATE_PORT}; 0 picks a free one, printed)",
    )
    emulate.add_argument(
        "--script",
        metavar="FILE",
        help="a JSON list of turns to play in each conversation: a text, or "
        '{"text": ..., "calls": [name or {"name", "path", "arguments"}]}',
    )
    emulate.add_argument("--answer", metavar="TEXT", help="the text answer (without a script)")
    emulate.add_argument(
        "--tool-rounds",
        type=_positive_int,
        default=1,
        help="rounds of tool calls before the answer (without a script; default 1)",
    )
    emulate.add_argument(
        "--text-chunks", type=_positive_int, default=6, help="SSE events per text (default 6)"
    )
    emulate.add_argument(
        "--chunk-delay",
        type=_non_negative,
        default=0.0,
        metavar="SECONDS",
        help="pause between streamed events (default 0)",
    )
    emulate.add_argument("-q", "--quiet", action="store_true", help="do not log requests")
    emulate.add_argument(
        "--backend", choices=("asyncio", "trio"), default="asyncio", help=argparse.SUPPRESS
    )

    serve = commands.add_parser(
        "serve",
        help="serve an agent over HTTP: its API (SSE, AG-UI, Vercel) and a page",
        description="Serves AGENT (module:attribute, like app:agent), or without it the agent "
        "`run` would build from -m/--tools and the other agent options, with uvicorn: POST "
        "/api/runs starts a run, GET /api/runs/RUN/events streams it (resumable with "
        "Last-Event-ID), and / is a page that shows it. With AGENT, -m replaces its model and "
        "--tools adds tools. Listens on 127.0.0.1 unless given a token: any other address "
        "without --token-env is refused. Needs agentloop-runtime[web].",
    )
    serve.add_argument(
        "agent", nargs="?", help="the agent, as module:attribute (default: built from -m)"
    )
    _agent_options(serve)
    serve.add_argument("--host", default="127.0.0.1", help="the address (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="the port (default 8000)")
    serve.add_argument(
        "--token-env",
        metavar="VAR",
        help="require `Authorization: Bearer <token>`, the token read from environment "
        "variable VAR (needed to listen beyond this machine)",
    )
    serve.add_argument("--store", metavar="URL", help="the session store (default: in memory)")
    serve.add_argument(
        "--max-runs-per-caller",
        type=_positive_int,
        default=8,
        metavar="N",
        help="runs one caller may have going at once (default 8; one more is 429)",
    )
    serve.add_argument(
        "--max-streams-per-caller",
        type=_positive_int,
        default=32,
        metavar="N",
        help="event streams one caller may hold open (default 32; one more is 429)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an origin allowed to call the API from a browser (repeatable; default none)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="another origin whose pages may start runs and decide calls, like "
        "https://app.example (repeatable; default: the server's own only)",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name the server answers to besides loopback ones, like agent.example or "
        "*.example.com (repeatable; any other is refused: DNS rebinding)",
    )
    serve.add_argument(
        "--head-timeout",
        type=_positive_float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection that has not sent its request head by then (default 10)",
    )
    serve.add_argument(
        "--max-pending-connections",
        type=_positive_int,
        default=128,
        metavar="N",
        help="connections without a request head yet; one more closes the oldest (default "
        "128, at most a quarter of the open-file limit)",
    )
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="log each request (uvicorn's access log; off by default)",
    )
    serve.add_argument(
        "--temporal",
        metavar="ADDRESS",
        help="run each run as a durable workflow on the Temporal server at host:port, served "
        "by `agentloop worker` processes: any number of replicas then serve any run (needs "
        "agentloop-runtime[temporal] and a session store the workers share: --store)",
    )
    _temporal_options(serve)

    work = commands.add_parser(
        "worker",
        help="serve the durable runs of `agentloop serve --temporal` from this machine",
        description="Performs the model and tool calls of AGENT's durable runs (module:attribute, "
        "an Agent or a TemporalAgent) for the replicas of `agentloop serve AGENT --temporal`: run "
        "as many as you like, on any machines. Runs until Ctrl-C. Needs "
        "agentloop-runtime[temporal].",
    )
    work.add_argument("agent", help="the agent, as module:attribute (like app:agent)")
    work.add_argument(
        "--temporal",
        metavar="ADDRESS",
        default="127.0.0.1:7233",
        help="the Temporal server's host:port (default 127.0.0.1:7233)",
    )
    _temporal_options(work)
    work.add_argument(
        "--store",
        metavar="URL",
        help="the session store the replicas share (default: the agent's own store)",
    )
    work.add_argument(
        "--sticky-timeout",
        type=_positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds before a run's next task leaves a worker that stopped answering for "
        "another (default 10); lower it to carry runs on sooner after a crash",
    )
    _eval_parser(commands)
    return parser


def _eval_parser(commands: Any) -> None:
    evaluate = commands.add_parser(
        "eval",
        help="run an eval suite (a YAML or JSON dataset) against an agent",
        description="Runs each case of DATASET against AGENT (module:attribute), each in "
        "isolation, scores it with the dataset's evaluators and prints a table of pass rates, "
        "latency and cost. Exit status 1 when a run failed or, with --compare, a pass rate "
        "went down.",
    )
    evaluate.add_argument("dataset", help="the dataset file (.yaml, .yml or .json)")
    evaluate.add_argument(
        "--agent", required=True, help="the agent, as module:attribute (like app:agent)"
    )
    evaluate.add_argument("-m", "--model", help="replace the agent's model (provider:model)")
    evaluate.add_argument("--base-url", help="an OpenAI-compatible (or Anthropic) base URL")
    evaluate.add_argument(
        "--repeat", type=_positive_int, default=1, help="runs of each case (default 1)"
    )
    evaluate.add_argument(
        "--concurrency", type=_positive_int, default=8, help="runs at once (default 8)"
    )
    evaluate.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        metavar="SECONDS",
        help="the deadline of each run of a case (default 120)",
    )
    evaluate.add_argument(
        "--tag", action="append", default=[], help="only cases with this tag (repeatable)"
    )
    evaluate.add_argument("--judge-model", help="the model of LLM judges that name none")
    evaluate.add_argument("--user-model", help="the model of simulated users that name none")
    evaluate.add_argument("--junit", metavar="FILE", help="write JUnit XML for CI")
    evaluate.add_argument("--report", metavar="FILE", help="write the report as JSON")
    evaluate.add_argument(
        "--compare", metavar="FILE", help="a report saved before: show what changed"
    )
    evaluate.add_argument(
        "--temporal", metavar="ADDRESS", help="run the cases as durable runs on Temporal"
    )
    evaluate.add_argument("--namespace", default="default", help=argparse.SUPPRESS)
    evaluate.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    evaluate.add_argument(
        "--backend", choices=("asyncio", "trio"), default="asyncio", help=argparse.SUPPRESS
    )


def _temporal_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", default="default", help="the Temporal namespace (default: default)"
    )
    parser.add_argument(
        "--task-queue",
        metavar="NAME",
        help="the task queue of the agent's runs (default: agentloop, or the TemporalAgent's)",
    )


def _agent_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-m",
        "--model",
        help="provider:model, e.g. openai:gpt-4o-mini, openai-responses:gpt-5, "
        "anthropic:claude-sonnet-4-5 (default $AGENTLOOP_MODEL)",
    )
    parser.add_argument("--base-url", help="an OpenAI-compatible (or Anthropic) server's base URL")
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="a tool, toolkit, toolset, function or list of them; MODULE alone, every tool it "
        "defines (repeatable; MODULE may be path/to/file.py)",
    )
    parser.add_argument(
        "--mode", choices=("native", "react", "auto"), default="auto", help="tool protocol"
    )
    parser.add_argument(
        "--max-steps", type=_positive_int, default=20, help="step limit (default 20)"
    )
    parser.add_argument(
        "--instructions", help="the system instructions (plain text, not a template)"
    )
    parser.add_argument(
        "--retries", type=_count, default=3, help="retries of a failed model call (default 3)"
    )


def _session_options(parser: argparse.ArgumentParser, default_store: str | None = None) -> None:
    parser.add_argument(
        "--session", metavar="ID", help="the session to run in (memory across runs)"
    )
    store_help = "sqlite:///path, postgresql://… or memory://"
    if default_store:
        store_help += f" (default {default_store})"
    else:
        store_help += " (default: a SQLite file in the user data dir with --session)"
    parser.add_argument("--store", metavar="URL", help=store_help)


def _output_options(parser: argparse.ArgumentParser, *, quiet: bool = False) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--json",
        action="store_true",
        help="one JSON event per line (event.to_json()), nothing else",
    )
    group.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    if quiet:
        group.add_argument("-q", "--quiet", action="store_true", help="print the answer only")
    parser.add_argument(
        "--backend", choices=("asyncio", "trio"), default="asyncio", help=argparse.SUPPRESS
    )


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):  # NaN too
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be 0-65535")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _style(args: argparse.Namespace) -> Any:
    if args.json:
        return "json"
    if getattr(args, "quiet", False):
        return "quiet"
    return "plain" if args.plain else "auto"


def _command(args: argparse.Namespace) -> Callable[[], Awaitable[int]]:
    """The coroutine function the arguments ask for (imports only what that command needs)."""
    style = _style(args)
    if args.command == "demo":
        from ._demo import run_demo

        return functools.partial(run_demo, args.speed, style=style)
    agent = _agent_of(args)
    if args.command == "run":
        from ._run import RunOptions, run_command

        options = RunOptions(
            prompt=args.prompt,
            agent=agent,
            goal=args.goal,
            session=args.session,
            store=args.store,
            style=style,
        )
        return functools.partial(run_command, options)
    from ._chat import ChatOptions, chat_command

    chat = ChatOptions(agent=agent, session=args.session, store=args.store, style=style)
    return functools.partial(chat_command, chat)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status. Ctrl-C cancels a chat turn, leaves the chat
    quietly at its prompt, else it ends the command (130). Run as the program (no ``argv``), outside the command Ctrl-C exits at
    once, and so does an interrupted command (no interpreter shutdown for a second Ctrl-C to
    land in)."""
    _forgiving_stdio()
    args = build_parser().parse_args(argv)
    if args.command == "emulate":  # serves from its own thread, and stops on Ctrl-C itself
        try:
            return _emulate(args)
        except (Exception, KeyboardInterrupt) as exc:
            return _failed(exc)
    if args.command == "serve":  # uvicorn stops on Ctrl-C itself
        try:
            return _serve(args)
        except (Exception, KeyboardInterrupt) as exc:
            return _failed(exc)
    if args.command == "worker":
        try:
            return _worker(args)
        except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:
            return _failed(exc)
    if args.command == "eval":
        try:
            return _eval(args)
        except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:
            return _failed(exc)
    program: ProgramEnd | None = None
    if argv is None and threading.current_thread() is threading.main_thread():
        program = ProgramEnd()
        program.exit_on_ctrl_c()
    run = functools.partial(run_interruptibly, _command(args), program=program)
    try:
        status = anyio.run(run, backend=args.backend)
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:
        return _failed(exc, program)
    if status is None:  # Ctrl-C ended it
        return _failed(KeyboardInterrupt(), program)
    if program is not None:
        program.left_quietly()  # Ctrl-C at the chat prompt: exits now, with status
    return status


def _emulate(args: argparse.Namespace) -> int:
    from ._emulate import EmulateOptions, emulate_command

    options = EmulateOptions(
        host=args.host,
        port=args.port,
        script=args.script,
        answer=args.answer,
        tool_rounds=args.tool_rounds,
        text_chunks=args.text_chunks,
        chunk_delay=args.chunk_delay,
        quiet=args.quiet,
        backend=args.backend,
    )
    return emulate_command(options)


def _serve(args: argparse.Namespace) -> int:
    try:
        from agentloop import web
    except ImportError as exc:
        raise UserError(
            f"agentloop serve needs the web extra: pip install 'agentloop-runtime[web]' ({exc})"
        ) from None
    auth = web.bearer_token(args.token_env) if args.token_env else None
    web.check_bind(args.host, auth)  # before anything is imported or opened
    agent = _served_agent(args, web.load_agent)
    limits = web.WebLimits(
        max_runs_per_owner=args.max_runs_per_caller,
        max_streams_per_owner=args.max_streams_per_caller,
        head_timeout=args.head_timeout,
        max_pending_connections=args.max_pending_connections,
    )
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "auth": auth,
        "limits": limits,
        "cors_origins": args.cors_origin,
        "allow_origins": args.allow_origin,
        "allow_hosts": args.allow_host,
        "access_log": args.access_log,
    }

    serve: Callable[..., Awaitable[None]] = web.serve
    if args.temporal:
        serve = _durable_serve(args)
    elif args.namespace != "default" or args.task_queue:
        raise UserError("--namespace and --task-queue are for --temporal")

    async def main() -> None:
        from ._setup import open_store

        store = open_store(args.store) if args.store else None
        async with agent:
            if store is None:
                await serve(agent, **options)
                return
            async with store:
                await serve(agent, store=store, **options)

    anyio.run(main)
    return 0


def _durable_serve(args: argparse.Namespace) -> Callable[..., Awaitable[None]]:
    """``serve`` with its runs on Temporal (``agentloop.durable_web.serve``)."""
    try:
        from agentloop import durable_web
    except ImportError as exc:
        raise UserError(
            "agentloop serve --temporal needs the temporal extra: pip install "
            f"'agentloop-runtime[web,temporal]' ({exc})"
        ) from None
    return functools.partial(
        durable_web.serve,
        temporal=args.temporal,
        namespace=args.namespace,
        task_queue=args.task_queue,
    )


def _worker(args: argparse.Namespace) -> int:
    from ._worker import WorkerOptions, worker_command

    options = WorkerOptions(
        agent=args.agent,
        temporal=args.temporal,
        namespace=args.namespace,
        task_queue=args.task_queue,
        store=args.store,
        sticky_timeout=args.sticky_timeout,
    )
    anyio.run(worker_command, options)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ._eval import EvalOptions, eval_command

    options = EvalOptions(
        dataset=args.dataset,
        agent=args.agent,
        model=args.model,
        base_url=args.base_url,
        repeat=args.repeat,
        concurrency=args.concurrency,
        timeout=args.timeout,
        tags=tuple(args.tag),
        judge_model=args.judge_model,
        user_model=args.user_model,
        junit=args.junit,
        report=args.report,
        compare=args.compare,
        temporal=args.temporal,
        namespace=args.namespace,
        plain=args.plain,
    )
    status: int = anyio.run(eval_command, options, backend=args.backend)
    return status


def _agent_of(args: argparse.Namespace) -> Any:
    from ._run import AgentOptions

    return AgentOptions(
        model=args.model,
        base_url=args.base_url,
        tools=tuple(args.tools),
        mode=args.mode,
        max_steps=args.max_steps,
        instructions=args.instructions,
        retries=args.retries,
    )


# The agent options that only describe an agent ``serve`` builds (AGENT has its own).
_BUILD_ONLY = {"mode": "auto", "max_steps": 20, "instructions": None, "retries": 3}


def _served_agent(args: argparse.Namespace, load_agent: Callable[[str], Any]) -> Any:
    """The agent ``serve`` serves: AGENT, its model replaced by ``-m`` and ``--tools`` added;
    else the one ``run`` builds from the same options."""
    from ._run import build_agent
    from ._setup import load_tools, make_model

    if args.agent is None:
        return build_agent(_agent_of(args))
    given = [f"--{k.replace('_', '-')}" for k, v in _BUILD_ONLY.items() if getattr(args, k) != v]
    if given:
        raise UserError(
            f"{', '.join(given)} describe the agent serve builds from -m; AGENT "
            f"({args.agent}) has its own settings"
        )
    agent = load_agent(args.agent)
    changes: dict[str, Any] = {}
    if args.model or args.base_url:
        changes["model"] = make_model(args.model, base_url=args.base_url)
    if args.tools:
        changes["tools"] = [*agent.tools, *load_tools(args.tools)]
    return agent.replace(**changes) if changes else agent


def _failed(exc: BaseException, program: ProgramEnd | None = None) -> int:
    """Say what went wrong in one line; the exit status."""
    if _leaves(exc, KeyboardInterrupt):
        if program is not None:
            program.interrupted()  # exits now
        say_interrupted()
        return INTERRUPTED
    if _leaves(exc, BrokenPipeError):
        # The reader went away (`agentloop run --json … | head`): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    if os.environ.get(DEBUG_ENV):
        raise exc
    error = _leaf(exc)
    _error(describe(error))
    return 2 if _is_usage(error) else 1


def describe(error: BaseException) -> str:
    """One line saying what went wrong."""
    text = " ".join(str(error).split())
    if isinstance(error, AgentLoopError):
        return text or type(error).__name__
    if isinstance(error, ModuleNotFoundError) and error.name == "trio":
        return "the trio backend needs trio: pip install trio"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _is_usage(error: BaseException) -> bool:
    return isinstance(error, UserError | ImportError)


def _leaf(error: BaseException) -> BaseException:
    """The one error inside (possibly nested) exception groups, else the group's first."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _leaves(error: BaseException, kind: type[BaseException]) -> bool:
    """Whether ``error`` is, or a group holds, an exception of ``kind``."""
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(kind) is not None
    return isinstance(error, kind)


def _error(message: str) -> None:
    sys.stderr.write(f"agentloop: error: {message}\n")
    sys.stderr.flush()


def _forgiving_stdio() -> None:
    """Never crash on a character the terminal's encoding cannot show."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="replace")
            except (ValueError, OSError):  # pragma: no cover - a detached stream
                pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
