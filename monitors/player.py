"""The sequence player in a terminal: an archive's frames shown as a live dashboard, with keys to pause, step and change speed."""

from __future__ import annotations

import re
import time
from dataclasses import replace

from .render import render
from .replay import Replay, ReplayError

SLOWEST, FASTEST = 1 / 64, 1024   # speeds `-` and `+` stop at (× recorded time)


class Keys:
    """Single keys from a terminal's stdin, without echo and without waiting for Enter (cbreak
    mode), while the block runs; the terminal's settings come back on exit, however it ends.
    Off a terminal (a pipe, a file) there are no keys: `read` only waits."""

    def __init__(self, stream):
        self.stream = stream
        self._saved = None
        self._pending: list[str] = []

    def __enter__(self) -> Keys:
        import termios
        import tty

        try:
            fd = self.stream.fileno()
            if self.stream.isatty():
                self._saved = termios.tcgetattr(fd)
                tty.setcbreak(fd)
                self.fd = fd
        except (OSError, ValueError, termios.error):
            self._saved = None
        return self

    @property
    def live(self) -> bool:
        return self._saved is not None

    def read(self, timeout: float) -> str | None:
        """The next key within `timeout` seconds: a character, `right` for the right arrow; None."""
        import os
        import select

        if not self._pending:
            if self._saved is None:
                time.sleep(max(0.0, timeout))
                return None
            ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
            if not ready:
                return None
            # Keys typed quickly come in one read: each is taken in turn.
            self._pending = re.findall(r"\x1b\[[A-D]|.", os.read(self.fd, 64).decode(errors="replace"), re.S)
        key = self._pending.pop(0) if self._pending else None
        return "right" if key == "\x1b[C" else key

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None


HELP = "space pause · s or → step · + faster · - slower · q quit"


def play(replay: Replay, console, speed: float = 1.0, stdin=None) -> int:
    """Show `replay` in the terminal (rich Live), one frame per `interval / speed` seconds, with
    keys (HELP) when stdin is a terminal; returns the frames shown. When the recording ends, a
    terminal stays on the last frame until `q`; without one it returns."""
    import sys

    from rich.live import Live

    frame = replay.read()
    shown, paused, ended = 1, False, False
    if not speed > 0:
        raise ReplayError(f"the speed must be a positive number (1 plays as recorded), got {speed!r}")
    with Keys(stdin if stdin is not None else sys.stdin) as keys, \
            Live(console=console, auto_refresh=False, transient=False) as live:
        def show():
            status = "ended" if ended else "paused" if paused else "playing"
            notes = [f"frame {frame.index + 1} of {replay.count}: {frame.at:.1f} s of {replay.end:.1f} s, "
                     f"{_speed_text(speed)} speed, {status}", f"{frame.events:,} events in this interval",
                     HELP if keys.live else ""]
            live.update(render(replace(frame.state, notes=notes)), refresh=True)

        show()
        due = time.monotonic() + replay.interval / speed
        while True:
            key = keys.read(0.05 if keys.live else max(0.0, due - time.monotonic()))
            advance = False
            if key in ("q", "Q"):
                break
            if key == " ":
                paused = not paused
                due = time.monotonic() + replay.interval / speed
            elif key in ("s", "S", "right"):
                paused, advance = True, True
            elif key in ("+", "="):
                speed = min(FASTEST, speed * 2)
            elif key in ("-", "_"):
                speed = max(SLOWEST, speed / 2)
            if not paused and not ended and time.monotonic() >= due:
                advance = True
                due += replay.interval / speed
            if advance and not ended:
                if replay.ended:
                    ended = True
                    if not keys.live:
                        break
                else:
                    frame = replay.read()
                    shown += 1
            if key is not None or advance:
                show()
    return shown


def _speed_text(speed: float) -> str:
    return f"{speed:g}×" if speed >= 1 else f"1/{round(1 / speed)}×"
