"""``scorer explain``: what every rule would decide for a file of traces and session events,
and why, offline.

The same engine the worker runs, with no broker and no judge call: the scorer's plan for
each trace (filters, sampling, variable lookups, checks, prompt rendering), then the file's
traces and coaching-session events routed and folded into threads and pairs by the worker's
own router and thread processor (``threads``), every thread closed at the end of the file,
and each close planned as the thread agent plans it (``file``: ``explain_file``). A rule that
would be judged shows the prompt it would send instead of a score. What is shown:
``records``. ``scorer estimate`` and ``scorer backfill`` plan through the same pieces.
"""

from .file import explain_file, explain_trace, is_session_event, parse_message
from .records import (
    DISABLED,
    PAIRS,
    WOULD_JUDGE,
    Explained,
    ExplainedClose,
    ExplainedTrace,
    FileOptions,
    Invalid,
    Note,
    Record,
    planning_scorer,
)
from .threads import FileThreads, first_moment

__all__ = [
    "DISABLED",
    "PAIRS",
    "WOULD_JUDGE",
    "Explained",
    "ExplainedClose",
    "ExplainedTrace",
    "FileOptions",
    "FileThreads",
    "Invalid",
    "Note",
    "Record",
    "explain_file",
    "explain_trace",
    "first_moment",
    "is_session_event",
    "parse_message",
    "planning_scorer",
]
