"""Parsing of human-friendly counts such as 500k, 1M, 2.5M or 1B."""

import re

from repro.errors import ReproError

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9}
_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMbBgG]?)\s*$")


def parse_count(text: str | int, what: str = "token count") -> int:
    """Parse '500k', '1M', '2.5M', '1B' or a plain integer into a positive int."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _COUNT.match(str(text).replace("_", ""))
        if not match:
            raise ReproError(
                f"malformed {what} {text!r}; "
                "use an integer or a number with k, M or B, such as 500k, 1M, 2.5M, 1B"
            )
        value = round(float(match.group(1)) * _SUFFIX[match.group(2).lower()])
    if value <= 0:
        raise ReproError(f"{what} must be positive, got {text!r}")
    return value


def parse_integers(text: str) -> list[int]:
    """ "1,2,4" -> [1, 2, 4]; a one-line ReproError otherwise."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise ReproError(f"{text!r} is not a comma-separated list of whole numbers") from None
