"""The one exception type for bad user input: its message is a single line that says what to do."""


class ReproError(ValueError):
    """Bad input or state detected before (or instead of) expensive work; printed as one line."""
