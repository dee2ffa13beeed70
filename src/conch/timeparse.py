"""The one parser of commit times, shared by Python (`asof=`, `since=`), the CLI and Spark.

A commit time is an int of microseconds since the Unix epoch (DESIGN §1). Accepted forms:

- `datetime` (naive means UTC), `date` (midnight UTC), pandas `Timestamp` (a `datetime`);
- an ISO 8601 string: `"2026-11-22"`, `"2026-11-22T10:00:00"`, `"2026-11-22T10:00:00+02:00"`,
  `"...Z"` (naive means UTC);
- an int (or a string of digits) of **microseconds** since the epoch, as `Commit.time` and
  `conch history` show them.

Ints below `MIN_TIME_US` (1973-03-03) are refused: such a value is almost always seconds,
milliseconds or a commit number (`asof=1`), and read as microseconds it would silently select a
moment before any table existed. Use `version=N` for commit numbers. Floats are refused for the
same reason (seconds? µs?).

>>> to_time("2026-11-22")
1795305600000000
>>> to_time(1795305600000000)
1795305600000000
"""

from __future__ import annotations

import numbers
from datetime import UTC, date, datetime

from conch.errors import TimeTravelError

MIN_TIME_US = 10**14  # 1973-03-03T09:46:40Z: smaller ints are seconds, ms or commit numbers

TimeLike = int | str | datetime | date


def to_time(value: object, what: str = "asof") -> int | None:
    """A commit-time bound (see the module doc) as µs since the epoch; None stays None.

    Raises `TimeTravelError` naming `what` ("asof", "since") for anything else.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, date):
        return to_time(datetime(value.year, value.month, value.day, tzinfo=UTC), what)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return _from_int(int(text), what)
        try:
            return to_time(datetime.fromisoformat(text), what)
        except ValueError:
            raise TimeTravelError(
                f"{what}={value!r} is not a commit time: use an ISO time like '2026-11-22T10:00:00' (UTC unless it "
                "has an offset) or µs since the epoch as `conch history` shows them"
            ) from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TimeTravelError(
            f"{what} must be a datetime, an ISO time string or an int of µs since the epoch, got {value!r}"
            + (" (a float is ambiguous: seconds or µs?)" if isinstance(value, float) else "")
        )
    return _from_int(int(value), what)


def _from_int(us: int, what: str) -> int:
    if us >= MIN_TIME_US:
        return us
    if us >= 0 and us < 10**4:
        hint = f"for commit number {us} use version={us}"
    elif us >= 10**11:
        hint = f"if it is milliseconds, pass {us * 1000}"
    elif us >= 10**8:
        hint = f"if it is seconds, pass {us * 1_000_000}"
    else:
        hint = "pass a datetime or an ISO time string"
    raise TimeTravelError(
        f"{what}={us} is read as µs since the epoch, which is before 1973: no table has commits then; {hint}"
    )


def format_time(us: int) -> str:
    """A commit time as an ISO string in UTC (for messages)."""
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC).isoformat()
