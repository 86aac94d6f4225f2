"""What the entry point says of this process, for the libraries to read.

Only an entry point calls :func:`asks_one_question` (as only an entry point
decides where logs go); a library host never does, and keeps the defaults
made for a process that serves many questions.
"""

from __future__ import annotations

__all__ = ["asks_one_question", "one_question"]

_one_question = False


def asks_one_question() -> None:
    """Declare that this process answers one question and exits (the
    ``acms`` console script's query commands): what a backend would build
    to serve later questions faster is not worth building."""
    global _one_question
    _one_question = True


def one_question() -> bool:
    """Whether the entry point declared a one-question process."""
    return _one_question
