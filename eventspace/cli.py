"""The `eventspace` command: a core that discovers each package's subcommands through entry points."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from importlib.metadata import entry_points

GROUP = "eventspace.commands"


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 2 (a traceback only with --debug)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `timeout`, `kill` and job managers such as Slurm send), raised where Ctrl-C
    raises KeyboardInterrupt, so that a command ends as it does on Ctrl-C: its nodes stopped, its
    files removed. The command then exits with 143 (128 + SIGTERM), as if the signal had ended it."""


class _OnSigterm:
    """The SIGTERM handler of a command: raises Terminated, once (`timeout` signals the process and
    then its process group: the second must not interrupt the cleanup that the first started)."""

    def __init__(self):
        self.raised = False

    def __call__(self, signum, frame) -> None:
        if not self.raised:
            self.raised = True
            raise Terminated


def build_parser() -> argparse.ArgumentParser:
    """The full parser: every entry point in GROUP adds its subcommands via `register(subparsers)`.

    Discovery by entry point keeps the layering: this core names no package above it.
    """
    parser = argparse.ArgumentParser(
        prog="eventspace",
        description="EventSpace: an online monitor of how parallel applications communicate.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name):
        ep.load()(subparsers)
    return parser


class _Stderr(logging.Handler):
    """Log records as plain lines on the current sys.stderr (a live rich display captures it then)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr, flush=True)


def _announce_runs() -> None:
    """Print the line `paths.launch` logs for every run it starts: its name and run file."""
    logger = logging.getLogger("paths.launch")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr())
    logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    _announce_runs()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _OnSigterm()) if main_thread else None
    try:
        return args.func(args) or 0
    except Terminated:
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one clear line for the user; the traceback is behind --debug
        if args.debug:
            raise
        print(f"eventspace {args.command}: {_message(exc)}", file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _message(exc: Exception) -> str:
    """The exception's message; never empty (a MemoryError, for one, has none)."""
    text = str(exc).strip()
    if text:
        return text
    if isinstance(exc, MemoryError):
        return "ran out of memory (MemoryError); give it a smaller input, or run with --debug to see where"
    return f"{type(exc).__name__} without a message; run with --debug to see where"


if __name__ == "__main__":
    sys.exit(main())
