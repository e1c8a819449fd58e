"""Progress of long work: a reporter object handed down to the code that runs long (no global state).

The library's default is no reporter (``None``) or :class:`Progress`, which does nothing.  The command line hands
down a :class:`StderrProgress`, which writes to stderr only (stdout's tables and ``--format json`` stay clean):

* on a terminal, one line redrawn in place, at most twice a second, from the first second on (a command that
  ends sooner prints nothing), cleared when the work ends;
* elsewhere (a log file, CI), a plain line from 10 s on, then at most every 30 s: a long run shows in its log that
  it is alive and where it is, a short one adds nothing, and a log of an hour-long sweep gets ~120 lines, not
  thousands.

What is reported: levels of counted work (a sweep's points, then the simulations of the point or run in progress)
and, from inside one simulation, the events it has processed and the simulated time it has reached
(:class:`~simfuse.engine.simulation.Simulation` calls :meth:`Progress.simulation` every
:data:`SIMULATION_EVERY_EVENTS` events).
"""

from __future__ import annotations

import sys
import time

#: events between two calls of :meth:`Progress.simulation` from inside a simulation (a DLRM event costs 7-22 us
#: of wall time on the 2-core VM, so 16,384 events are 0.1-0.4 s: often enough for a live line, rare enough to
#: cost nothing measurable)
SIMULATION_EVERY_EVENTS = 16_384


class Progress:
    """A reporter that does nothing (the library default).  Levels: 0 is the outermost work (a sweep's points or
    a run's simulations); :meth:`nested` gives a reporter for the work inside one of its units."""

    def begin(self, what: str, total: int | None = None, *, up_to: bool = False) -> None:
        """Start counting ``total`` units of ``what`` (``up_to``: ``total`` is an upper bound)."""

    def advance(self, note: str = "", *, eta_s: float | None = None) -> None:
        """One unit done; ``note`` says what comes next or what finished, ``eta_s`` the time left if known."""

    def doing(self, note: str) -> None:
        """What the unit in progress is (shown beside the count)."""

    def simulation(self, events: int, sim_time_s: float) -> None:
        """Heartbeat from inside one simulation: events processed so far and the simulated time reached."""

    def note(self, text: str) -> None:
        """A one-off line (not throttled)."""

    def tick(self) -> None:
        """Nothing new, but the caller is waiting (e.g. on worker processes): refresh the elapsed time."""

    def nested(self) -> Progress:
        """The reporter for the work inside one unit of this one."""
        return self

    def close(self) -> None:
        """The work is over (clears a terminal line)."""


def as_progress(progress) -> Progress:
    """``progress`` as a reporter: None or False -> a no-op :class:`Progress`; True -> :class:`StderrProgress`."""
    if progress is None or progress is False:
        return Progress()
    if progress is True:
        return StderrProgress()
    return progress


class command_progress:
    """``with command_progress(args, "simfuse run") as progress``: a command's reporter, a
    :class:`StderrProgress` (a no-op :class:`Progress` with ``args.quiet``), its terminal line cleared at the
    end, also on errors."""

    def __init__(self, args, prefix: str):
        self.progress = Progress() if getattr(args, "quiet", False) else StderrProgress(prefix)

    def __enter__(self) -> Progress:
        return self.progress

    def __exit__(self, *exc) -> None:
        self.progress.close()


class ticking:
    """``with ticking(progress, "fitting the wave models"):`` for one long call that reports nothing itself: a
    daemon thread refreshes ``progress`` (its elapsed time) every ``every_s`` until the body ends."""

    def __init__(self, progress: Progress, what: str, every_s: float = 1.0):
        import threading

        self.progress, self.what, self.every_s = progress, what, every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="simfuse-progress", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.progress.tick()

    def __enter__(self) -> Progress:
        self.progress.begin(self.what)
        self.thread.start()
        return self.progress

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def _clock(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _count(n: float) -> str:
    for unit, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= f:
            return f"{n / f:.3g}{unit}"
    return f"{int(n)}"


class _Level:
    __slots__ = ("what", "total", "up_to", "done", "note", "eta_s", "eta_at")

    def __init__(self, what: str, total: int | None, up_to: bool):
        self.what, self.total, self.up_to = what, total, up_to
        self.done, self.note, self.eta_s, self.eta_at = 0, "", None, 0.0

    def text(self, now: float) -> str:
        if self.total is None:
            s = self.what if not self.done else f"{self.what} {self.done + 1}"
        else:
            s = f"{self.what} {min(self.done + 1, self.total)}/{'<=' if self.up_to else ''}{self.total}"
            if self.done >= self.total:
                s = f"{self.what} {self.done}/{self.total} done"
        if self.note:
            s += f" ({self.note})"
        if self.eta_s is not None:
            left = self.eta_s - (now - self.eta_at)
            s += f", ~{_clock(left)} left" if left > 0 else ", finishing"
        return s


class StderrProgress(Progress):
    """The command line's reporter (see the module docstring).  ``prefix``: the command (``simfuse run``);
    ``stream``: stderr by default; ``tty``: whether to redraw one line (default: the stream is a terminal);
    ``clock``: the time source (tests pass a fake one)."""

    def __init__(self, prefix: str = "simfuse", stream=None, tty: bool | None = None, clock=time.monotonic,
                 first_s: float | None = None, every_s: float | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.clock = clock
        self.prefix = prefix
        self.first_s = first_s if first_s is not None else (1.0 if self.tty else 10.0)
        self.every_s = every_s if every_s is not None else (0.5 if self.tty else 30.0)
        self.t0 = clock()
        self.last = None  # when the last line was written
        self.levels: list[_Level | None] = []
        self.sim = ""
        self.drawn = False

    # -- the reporter interface, at level 0 (nested() gives the deeper levels)
    def begin(self, what: str, total: int | None = None, *, up_to: bool = False) -> None:
        self._begin(0, what, total, up_to)

    def advance(self, note: str = "", *, eta_s: float | None = None) -> None:
        self._advance(0, note, eta_s)

    def nested(self) -> Progress:
        return _Nested(self, 1)

    def doing(self, note: str) -> None:
        self._doing(0, note)

    def simulation(self, events: int, sim_time_s: float) -> None:
        self.sim = f"{_count(events)} events, {sim_time_s * 1e3:.3g} ms simulated"
        self._maybe_draw()

    def tick(self) -> None:
        self._maybe_draw()

    def note(self, text: str) -> None:
        self._clear()
        print(f"{self.prefix}: {text}", file=self.stream, flush=True)

    def close(self) -> None:
        self._clear()

    # -- internals
    def _begin(self, level: int, what: str, total, up_to: bool) -> None:
        del self.levels[level:]
        self.levels.extend([None] * (level - len(self.levels)))
        self.levels.append(_Level(what, total, up_to))
        self.sim = ""
        self._maybe_draw()

    def _advance(self, level: int, note: str, eta_s) -> None:
        if level >= len(self.levels) or self.levels[level] is None:
            return
        lv = self.levels[level]
        lv.done += 1
        lv.note = note  # what comes next, if the caller says
        if eta_s is not None:
            lv.eta_s, lv.eta_at = eta_s, self.clock()
        del self.levels[level + 1:]
        self.sim = ""
        self._maybe_draw()

    def _doing(self, level: int, note: str) -> None:
        if level < len(self.levels) and self.levels[level] is not None:
            self.levels[level].note = note
            del self.levels[level + 1:]
            self.sim = ""
            self._maybe_draw()

    def line(self) -> str:
        """The progress line as it would be written now."""
        now = self.clock()
        parts = [lv.text(now) for lv in self.levels if lv is not None]
        if self.sim:
            parts.append(self.sim)
        return f"{self.prefix} [{_clock(now - self.t0)}]: {' | '.join(parts) or 'working'}"

    def _maybe_draw(self) -> None:
        now = self.clock()
        if now - self.t0 < self.first_s or (self.last is not None and now - self.last < self.every_s):
            return
        self.last = now
        text = self.line()
        if self.tty:  # one screen line, or the next redraw cannot overwrite it
            import shutil

            text = text[:max(20, shutil.get_terminal_size().columns - 1)]
            self.stream.write("\r" + text + "\x1b[K")
            self.stream.flush()
            self.drawn = True
        else:
            print(text, file=self.stream, flush=True)

    def _clear(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False


class _Nested(Progress):
    """Level ``level`` of a :class:`StderrProgress`."""

    def __init__(self, root: StderrProgress, level: int):
        self.root, self.level = root, level

    def begin(self, what: str, total: int | None = None, *, up_to: bool = False) -> None:
        self.root._begin(self.level, what, total, up_to)

    def advance(self, note: str = "", *, eta_s: float | None = None) -> None:
        self.root._advance(self.level, note, eta_s)

    def doing(self, note: str) -> None:
        self.root._doing(self.level, note)

    def simulation(self, events: int, sim_time_s: float) -> None:
        self.root.simulation(events, sim_time_s)

    def note(self, text: str) -> None:
        self.root.note(text)

    def tick(self) -> None:
        self.root.tick()

    def nested(self) -> Progress:
        return _Nested(self.root, self.level + 1)
