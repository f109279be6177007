"""Progress bars as text that reads well wherever it is written: a bar redrawn in place on a
terminal or in a notebook's output (which keeps its last state), else (a log file, a pipe) a line
now and then (LineStream), never carriage-return fragments."""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import TextIO

from tqdm.std import tqdm

LINE_EVERY_S = 30.0  # seconds between two lines of a bar written where redraws do not show


class LineStream:
    """A progress bar's stream where a carriage return does not redraw (a log file, a pipe that a
    notebook saves): the bar's latest state as one line at most every LINE_EVERY_S seconds, and
    its last state at `close`."""

    def __init__(self, target: TextIO):
        self.target, self._state, self._written, self._at = target, "", "", -math.inf

    def write(self, text: str) -> None:
        state = text.replace("\r", "\n").strip().rsplit("\n", 1)[-1]
        if state:
            self._state = state
        if time.monotonic() - self._at >= LINE_EVERY_S:
            self.close()

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> None:
        """Write the latest state, unless it is the last line written."""
        if self._state and self._state != self._written:
            self.target.write(self._state + "\n")
            self.target.flush()
            self._written, self._at = self._state, time.monotonic()


class _LineBar(tqdm):
    """A text bar on a LineStream that writes its last state when it closes."""

    def __init__(self, lines: LineStream, **kwargs):
        self.lines = lines
        super().__init__(file=lines, **kwargs)

    def close(self) -> None:
        if not self.disable and self._time() - self.start_t >= self.delay:
            self.refresh()  # its last state, which a fast loop may not have drawn
        super().close()
        self.lines.close()


# A bar of one process: a thread lock, not tqdm's default multiprocessing one, whose semaphore a
# sweep's worker stopped by a signal would leave behind (the resource tracker's warning at exit)
_LineBar.set_lock(threading.RLock())


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (whose stream outputs redraw a carriage return)."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and type(ipython.get_ipython()).__name__ == "ZMQInteractiveShell"


def progress_bar(**kwargs) -> tqdm:
    """A text bar on stderr (keyword arguments as tqdm's), redrawn where redraws show (a terminal,
    a notebook's kernel), elsewhere a line at most every LINE_EVERY_S seconds and at its end."""
    if in_kernel() or sys.stderr.isatty():
        return tqdm(**kwargs)
    return _LineBar(LineStream(sys.stderr), **kwargs)
