"""A monitor command's session with a live run: found, attached, pulled every interval, read once more at its end."""

from __future__ import annotations

import atexit
import json
import time

from rich.markup import escape

from pastset import PastSetError
from pastset.terminal import console
from paths import RunFile
from paths.runfile import run_ended

# Why a watch ended when the run's launcher said its program had ended and waited for the final read.
PROGRAM_ENDED = "its program ended"
# How often a watch that waits for its next pull looks for the end of the run's program (a stat).
_LOOK_EVERY = 0.05


class Watch:
    """What every `eventspace monitor ...` command does around its monitor.

    Made with the run's name (or run file) and the monitor's kind, it finds the live run (RunError,
    one line, if there is none), lists this process among the run's monitors (`eventspace runs`)
    until `detach()` or the process's end, and at once says on the people's console that it
    watches, before anything slower (a scope, clocks) is built.

    `loop(pull, show)` calls `show(pull())` every `interval` seconds until `duration` passes,
    Ctrl-C, or the run ends. When the run's launcher says the program has ended (it waits, its
    nodes still serving, for the monitors attached: `paths.RunFile.end`), the watch makes one
    more pull, the final read of what the collectors wrote last, shows it too, and ends; the
    caller then closes its monitor and detaches, and the launcher stops the nodes.

    Output: with `json_lines`, stdout carries JSON objects only, one line each (`emit`), and the
    last says how the watch ended (`finish`); the lines for people (`say`) go to stderr. Without,
    tables and lines go to stdout, and nothing is cut when it is a pipe or a file.
    """

    def __init__(self, run: str, kind: str, *, interval: float, duration: float | None = None,
                 json_lines: bool = False):
        self.kind = kind
        self.interval = interval
        self.duration = duration
        self.json_lines = json_lines
        self.out = console(highlight=False)                       # tables, or JSON lines
        self.people = console(stderr=json_lines, highlight=False)  # lines for people
        self.run_file = RunFile.find(run).check_live()
        self._entry = self.run_file.attach_monitor(kind)
        atexit.register(self._entry.close)
        self.why: str | None = None     # why the loop ended: how the run ended, or None (duration, Ctrl-C)
        nodes = len(self.run_file.endpoints)
        self.say(f"{kind}: watching run {escape(self.run_file.name)} ({nodes} node{'s' if nodes != 1 else ''}, "
                 f"started {time.time() - self.run_file.started:.0f} s ago)", style="dim")

    def say(self, text: str, **options) -> None:
        """A line for people: stdout, or stderr under --json."""
        self.people.print(text, **options)

    def emit(self, obj: dict) -> None:
        """One JSON line on stdout."""
        print(json.dumps(obj), flush=True)

    def loop(self, pull, show) -> str | None:
        """`show(pull())` every interval until the duration passes, Ctrl-C, or the run ends; why the
        run ended (also `self.why`), or None.

        The run has ended when its program has (the launcher waits for this watch's final read:
        `show(pull())` once more, then it returns PROGRAM_ENDED), or when `paths.runfile.run_ended`
        says so (the launcher removed the run file, or every node is gone), checked after every
        pull, before its result is shown (a pull of a run that has just ended shows nothing worth
        seeing).
        """
        deadline = None if self.duration is None else time.monotonic() + self.duration
        try:
            while deadline is None or time.monotonic() < deadline:
                started = time.monotonic()
                ending = self.run_file.ending()   # before the pull: then that pull is a final read
                try:
                    result = pull()
                except PastSetError:
                    self.why = run_ended(self.run_file)
                    if self.why:
                        return self.why
                    raise
                if ending or self.run_file.ending():
                    show(result)
                    if not ending:    # the program ended during the pull: read once more
                        try:
                            show(pull())
                        except PastSetError:
                            pass
                    self.why = PROGRAM_ENDED
                    return self.why
                self.why = run_ended(self.run_file)
                if self.why:
                    return self.why
                show(result)
                self._wait(started + self.interval, deadline)
        except KeyboardInterrupt:
            pass
        return self.why

    def _wait(self, until: float, deadline: float | None) -> None:
        """Sleep until `until` (or the deadline), waking early when the run's program ends."""
        if deadline is not None:
            until = min(until, deadline)
        while (left := until - time.monotonic()) > 0:
            if self.run_file.ending():
                return
            time.sleep(min(left, _LOOK_EVERY))

    def detach(self) -> None:
        """No longer listed among the run's monitors: a launcher waiting for the final read goes on."""
        self._entry.close()

    def finish(self, summary: str, figures: dict | None = None) -> None:
        """The watch's last line: `run NAME ended: WHY; SUMMARY` when the run ended, else the summary;
        under --json, also a last JSON object `{"ended": ..., "run": ..., "why": ..., **figures}`."""
        self.detach()
        ended = self.why is not None
        if self.json_lines:
            self.emit({"ended": ended, "run": self.run_file.name, "why": self.why, **(figures or {})})
        line = f"run {self.run_file.name} ended: {self.why}; {summary}" if ended else summary
        self.say(escape(line))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()
