import json

import pytest

from repro.errors import ReproError
from repro.runtime.config import RunConfig, config_record, make_run_config, run_identity


def test_tuple_fields_parse_once_and_keep_their_text_form():
    config = make_run_config({"batch_schedule": "0:2,0.5:8,0.75:32", "save_steps": "20,10,20"})
    assert config.batch_schedule == ((0.0, 2), (0.5, 8), (0.75, 32))
    assert config.save_steps == (10, 20)  # sorted, each step once
    record = config_record(config)
    assert record["batch_schedule"] == "0:2,0.5:8,0.75:32" and record["save_steps"] == "10,20"
    assert make_run_config(json.loads(json.dumps(record))) == config  # config.json round trip
    assert make_run_config({"batch_schedule": [[0, 2], [0.5, 8]]}).batch_schedule == (
        (0.0, 2),
        (0.5, 8),
    )


def test_defaults_keep_the_old_text_form_in_run_identity():
    """Run ids hash config_record: the defaults of the tuple fields are the empty strings that
    stored runs were identified with."""
    identity = run_identity(RunConfig())
    assert identity["batch_schedule"] == "" and identity["save_steps"] == ""


@pytest.mark.parametrize(
    "values,message",
    [
        ({"batch_schedule": "0:4,0.4:8,0.3:16"}, "must look like"),
        ({"batch_schedule": "0:0"}, "must look like"),
        ({"batch_schedule": "0:4,1:8"}, "must look like"),
        ({"batch_schedule": [[0, 4, 1]]}, "must look like"),
        ({"save_steps": [1.5]}, "not a comma-separated list"),
        ({"min_lr_ratio": float("nan")}, "not a finite number"),
    ],
)
def test_malformed_values_are_one_line_errors(values, message):
    with pytest.raises(ReproError, match=message) as error:
        make_run_config(values)
    assert "\n" not in str(error.value)
