"""Durations: seconds (or timedeltas) in the Python API, "30s"-style text on
the command line, google.protobuf.Duration on the wire."""

from __future__ import annotations

import datetime
import re

from google.protobuf.duration_pb2 import Duration

# Go's time.ParseDuration's units, whose syntax the flags and the examples'
# annotations take.
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def seconds(option: str, value: object) -> float:
    """Check a duration option (a number of seconds or a timedelta) and
    return it in seconds; ``option`` names it in the error."""
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{option}= takes seconds (a number) or a timedelta, not {value!r}")
    if value < 0:
        raise ValueError(f"{option}={value!r} is negative")
    return float(value)


def to_proto(secs: float) -> Duration:
    nanos = round(secs * 1e9)
    return Duration(seconds=nanos // 1_000_000_000, nanos=nanos % 1_000_000_000)


def optional(secs: float | None) -> Duration | None:
    """The wire form of an option where zero means unset (the broker's
    default): None for None and zero."""
    return to_proto(secs) if secs else None


def from_proto(d: Duration) -> float:
    return d.seconds + d.nanos / 1e9


def parse_go(text: str) -> float:
    """Seconds from a Go duration ("1h30m", "-5m", "0"); ValueError when it
    is not one, as for Go's time.ParseDuration: a bare number other than 0
    is not one."""
    sign, rest = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text[1:] if text[:1] == "+" else text)
    if rest == "0":
        return 0.0
    total, pos = 0.0, 0
    for m in _PART.finditer(rest):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not rest or pos != len(rest):
        raise ValueError(f"{text!r} is not a Go duration")
    return sign * total


def parse(text: str) -> float:
    """Parse "90", "1.5", "500ms", "30s", "5m", "1h30m" into seconds: a bare
    number is seconds, as in Kopf's options; anything else a Go duration."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_go(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a duration (e.g. 30s, 500ms, 5m, 1h30m, or seconds)") from None
    if value < 0 or value != value:
        raise ValueError(f"{text!r} is not a duration of zero or more")
    return value
