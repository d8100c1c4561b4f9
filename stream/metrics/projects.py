"""The ``project`` label of the score metrics, bounded: a project's own name for the projects
it keeps, ``other`` for the rest, so the number of series stays bounded whatever project names
traffic brings (design record 14).

Configured (``SCORER_METRIC_PROJECTS``), exactly the listed projects are kept: the same on
every worker. Unset, the projects the loaded rules' filters name are kept, and so are the
first ``limit`` other projects this worker scores; past them every new project is ``other``
(a warning says so once, naming the setting).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)

OTHER = "other"  # the label of every project not kept
DEFAULT_PROJECT_LIMIT = 10  # projects named as they come when none are configured


class ProjectLabels:
    """What ``project`` label a score of each project gets.

    ``configured``: the projects to keep (None: automatic). ``named``: projects the rules'
    filters name, kept in automatic mode beyond the limit. ``limit``: how many other projects
    automatic mode keeps, first come first kept.
    """

    def __init__(
        self,
        configured: Iterable[str] | None = None,
        named: Iterable[str] = (),
        limit: int = DEFAULT_PROJECT_LIMIT,
    ) -> None:
        if limit < 0:
            raise ValueError(f"the project limit must be 0 or more, not {limit}")
        self.configured = configured is not None
        self._kept: set[str] = set(configured if configured is not None else named)
        self._limit = 0 if self.configured else limit
        self._first_come = 0  # projects kept as they came (automatic mode)
        self._folded = False  # the warning about folding was given

    def label(self, project: str) -> str:
        """The label of a score of ``project``: its name if kept, else ``other``. Memory stays
        bounded too: a folded project is not remembered."""
        if project in self._kept:
            return project
        if self._first_come < self._limit:
            self._first_come += 1
            self._kept.add(project)
            return project
        if not self._folded:
            self._folded = True
            if self.configured:  # what the deployment asked for: said once, not warned
                log.info(
                    "score metrics: project %r is not in SCORER_METRIC_PROJECTS: labelled %r, "
                    "as every project not listed",
                    project,
                    OTHER,
                )
            else:
                log.warning(
                    "score metrics: %d projects are labelled by name already "
                    "(SCORER_METRIC_PROJECT_LIMIT): project %r and every later new one are "
                    "labelled %r; list the projects to keep in SCORER_METRIC_PROJECTS",
                    self._limit,
                    project,
                    OTHER,
                )
        return OTHER

    def name(self, projects: Iterable[str]) -> None:
        """Projects a (re)loaded rule set's filters name: kept from now on in automatic mode
        (a configured list is left as it is)."""
        if not self.configured:
            self._kept.update(projects)

    @property
    def kept(self) -> frozenset[str]:
        """The projects labelled by name so far."""
        return frozenset(self._kept)
