"""The one parser of commit times and ages, shared by Python (`asof=`, `since=`,
`expire(older_than=)`), the CLI (`--asof`, `--since`, `--older-than`) and Spark options.

One rule for every time-like argument: **an int is a point in time, in µs since the epoch**
(DESIGN §1); **an age is a duration** (`"7d"`, `"12h"`, `"30m"`, `"90s"`, `"2w"`, `"0s"`, or a
`timedelta`); datetimes and ISO strings are points in time. `to_time` takes points (`asof`,
`since`); `to_cutoff` takes an age or a point (`older_than`: "older than 7 days" or "older than
this commit time") and gives the point. Every value out of range is a typed error
(`TimeTravelError`), never an `OverflowError` from a database.

A commit time is an int of microseconds since the Unix epoch. Accepted forms:

- `datetime` (naive means UTC), `date` (midnight UTC), pandas `Timestamp` (a `datetime`);
- an ISO 8601 string: `"2026-11-22"`, `"2026-11-22T10:00:00"`, `"2026-11-22T10:00:00+02:00"`,
  `"...Z"` (naive means UTC);
- an int (or a string of digits) of **microseconds** since the epoch, as `Commit.time` and
  `conch history` show them.

Ints below `MIN_TIME_US` (1973-03-03) and above `MAX_TIME_US` (the year 9999) are refused: such a value is almost always seconds,
milliseconds or a commit number (`asof=1`), and read as microseconds it would silently select a
moment before any table existed. Use `version=N` for commit numbers. Floats are refused for the
same reason (seconds? µs?).

>>> to_time("2026-11-22")
1795305600000000
>>> to_time(1795305600000000)
1795305600000000
"""

from __future__ import annotations

import math
import numbers
import re
import time
from datetime import UTC, date, datetime, timedelta

from conch.errors import TimeTravelError

MIN_TIME_US = 10**14  # 1973-03-03T09:46:40Z: smaller ints are seconds, ms or commit numbers
MAX_TIME_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z, the last instant `datetime` has

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
        try:  # exact: a float of seconds loses µs far from 1970
            return (value - _EPOCH) // timedelta(microseconds=1)
        except OverflowError:  # an offset past the year 9999 or before 1
            raise TimeTravelError(f"{what}={value!r} is out of range (years 1 to 9999)") from None
    if isinstance(value, date):
        return to_time(datetime(value.year, value.month, value.day, tzinfo=UTC), what)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return _from_int(int(text), what)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise TimeTravelError(
                f"{what}={value!r} is not a commit time: use an ISO time like '2026-11-22T10:00:00' (UTC unless it "
                "has an offset) or µs since the epoch as `conch history` shows them"
            ) from None
        return to_time(parsed, what)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TimeTravelError(
            f"{what} must be a datetime, an ISO time string or an int of µs since the epoch, got {value!r}"
            + (" (a float is ambiguous: seconds or µs?)" if isinstance(value, float) else "")
        )
    return _from_int(int(value), what)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _from_int(us: int, what: str) -> int:
    if us > MAX_TIME_US:
        raise TimeTravelError(
            f"{what}={us} is read as µs since the epoch, which is after the year 9999: pass a commit time as "
            "`conch history` shows it, a datetime or an ISO time string"
        )
    if us >= MIN_TIME_US:
        return us
    if us >= 0 and us < 10**4:
        hint = f"for commit number {us} use version={us} (`--version {us}` in the CLI)"
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
    try:
        return (_EPOCH + timedelta(microseconds=us)).isoformat()  # exact to the µs
    except OverflowError:
        return f"{us} µs since the epoch (out of range)"


_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|m|h|d|w)\s*", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
AGE_FORMS = "a duration such as '7d', '12h', '30m', '90s', '2w', '0s' or a timedelta"

AgeOrTime = str | timedelta | datetime | date | int


def to_age(value: object, what: str) -> float | None:
    """The seconds an age names (`timedelta`, a duration string such as `"7d"`); None when
    `value` is not an age (a point in time, or nothing valid). Negative or non-finite ages are
    a `TimeTravelError`."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]
    else:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        raise TimeTravelError(f"{what}={value!r}: an age is a finite duration >= 0")
    return seconds


def to_cutoff(value: object, what: str = "older_than", now_us: int | None = None) -> int:
    """The point in time (µs since the epoch) `value` names: an age before now (`to_age`), or a
    point in time (`to_time`: an int of µs since the epoch, a datetime, an ISO string). An age
    reaching back before 1970 is the epoch (nothing is that old)."""
    now = time.time_ns() // 1000 if now_us is None else now_us
    seconds = to_age(value, what)
    if seconds is not None:
        return max(now - round(min(seconds, now / 1e6) * 1_000_000), 0)
    if value is None:
        raise TimeTravelError(f"{what} needs {AGE_FORMS}, or a point in time (a datetime, an ISO time)")
    try:
        at = to_time(value, what)
    except TimeTravelError as e:
        small = isinstance(value, int) and not isinstance(value, bool) and value < MIN_TIME_US
        small |= isinstance(value, str) and value.strip().lstrip("-").isdigit() and int(value) < MIN_TIME_US
        if not small:
            raise TimeTravelError(f"{e}; or an age: {AGE_FORMS}") from None
        raise TimeTravelError(
            f"{what}={value!r}: an int is a point in time (µs since the epoch, as `conch history` shows commit "
            f"times); for an age write {AGE_FORMS} (e.g. '{value}s' for {value} seconds)"
        ) from None
    assert at is not None
    return at
