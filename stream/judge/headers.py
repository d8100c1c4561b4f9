"""What providers' rate-limit headers say: ``Retry-After`` (seconds or an HTTP date),
Azure's ``retry-after-ms``, and OpenAI's reset durations (``x-ratelimit-reset-*``)."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime


def number(value: str | None) -> float | None:
    """A header's value as a number; None when absent or not one."""
    if not value:
        return None
    try:
        found = float(value)
    except ValueError:
        return None
    return found if math.isfinite(found) else None  # "inf", "nan": not a limit


_DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?"
)


def duration_seconds(value: str | None) -> float | None:
    """Seconds in an OpenAI reset duration (``x-ratelimit-reset-*``: "1s", "6m0s", "120ms",
    "1m30.5s"), or a bare number of seconds; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if (seconds := number(value)) is not None:
        return max(0.0, seconds)
    match = _DURATION.fullmatch(value)
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date)."""
    if headers is None:
        return None
    if ms := headers.get("retry-after-ms"):
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    if value := headers.get("retry-after"):
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    return None
