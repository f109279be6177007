"""A notebook's opening table of what its run found (repro.analysis.findings)."""

import math

import pandas as pd

from repro.analysis.findings import findings_table


def _claims(rows: list[tuple[str, str, float, float, float, float]]) -> pd.DataFrame:
    names = ["claim", "agrees?", "effect", "low", "high", "n"]
    return pd.DataFrame(rows, columns=names).assign(paper="yes", **{"measured here": "..."})


def test_each_claim_is_a_row_with_its_verdict_effect_and_interval():
    first = _claims([("a wins", "agrees", -0.1, -0.15, -0.05, 8)])
    second = _claims(
        [
            ("b loses", "disagrees", 0.2, 0.1, 0.3, 8),
            ("c is flat", "undetermined", math.nan, math.nan, math.nan, math.nan),
        ]
    )
    text = findings_table("cpu", [first, second])
    lines = text.splitlines()
    assert lines[0] == (
        "**What this run found** (preset cpu): 3 claims tested, 2 decided: 1 agrees, "
        "1 disagrees, 1 undetermined."
    )
    assert lines[4] == "| a wins | yes | **agrees**: effect -0.100 [-0.150, -0.050], n = 8 |"
    assert lines[5] == "| b loses | yes | **disagrees**: effect +0.200 [+0.100, +0.300], n = 8 |"
    assert lines[6] == "| c is flat | yes | **undetermined** |"


def test_an_effect_without_an_interval_shows_the_effect_alone():
    claims = _claims([("d", "undetermined", 0.05, -math.inf, math.inf, 1)])
    assert findings_table("smoke", [claims]).splitlines()[-1] == (
        "| d | yes | **undetermined**: effect +0.050, n = 1 |"
    )
