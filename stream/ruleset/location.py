"""Where the rule packs are when ``SCORER_RULES_DIR`` is not set.

The repository keeps them in ``rules/`` (the layout users know); the package installs that
folder as ``llm_trace_scorer_rules``, so an installed scorer finds its packs from any directory
(``pip install .``, the Docker image), and an editable install finds the repository's own
``rules/``. The location is looked up, never imported: the packs' Python is loaded by path
(``packs.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "llm_trace_scorer_rules"
# a source tree run without installing (python -m stream.cli from the repository)
REPO_RULES_DIR = Path(__file__).resolve().parents[2] / "rules"


def default_rules_dir() -> Path:
    """The installed packs' folder, or the repository's ``rules/`` when nothing is installed."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return REPO_RULES_DIR
