"""Retry timing for provider calls: server-directed waits first, exponential backoff otherwise.

Our own loop instead of the SDK's (which is switched off with ``max_retries=0``): the number of
attempts and the base delay come from config per provider, every wait is logged without request
data, a ``retry-after`` beyond what we are willing to wait fails fast as rate-limited instead of
hanging a pipeline, and the final failure maps to one typed error.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

MAX_RETRY_AFTER_S = 60.0
MAX_BACKOFF_S = 30.0
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, then ``retry-after`` (seconds or HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = lowered.get("retry-after")
    if value:
        parsed = email.utils.parsedate_tz(value)
        if parsed is not None:
            return max(0.0, email.utils.mktime_tz(parsed) - time.time())
    return None


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    backoff_base_s: float = 0.5
    max_retry_after_s: float = MAX_RETRY_AFTER_S

    def delay(self, retry_index: int, retry_after: float | None) -> float:
        """Wait before retry number ``retry_index`` (0-based)."""
        if retry_after is not None:
            return retry_after
        factor: int = 2**retry_index
        return min(self.backoff_base_s * factor, MAX_BACKOFF_S)

    def may_retry(self, retry_index: int, retry_after: float | None) -> bool:
        if retry_index >= self.max_retries:
            return False
        return retry_after is None or retry_after <= self.max_retry_after_s
