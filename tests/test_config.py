import json

import pytest

import repro.runtime.config as config_module
from repro.errors import ReproError
from repro.runtime.config import (
    RunConfig,
    check_fields,
    config_record,
    make_run_config,
    run_id,
    run_identity,
)

BETAS = ("adam_beta1", "adam_beta2")


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
        ({"min_lr_ratio": float("nan")}, "min_lr_ratio: expected a finite float, got nan"),
    ],
)
def test_malformed_values_are_one_line_errors(values, message):
    with pytest.raises(ReproError, match=message) as error:
        make_run_config(values)
    assert "\n" not in str(error.value)


def test_default_betas_leave_run_ids_unchanged(monkeypatch):
    """A run id with the betas at their defaults is the id the same run had before the betas were
    run fields (the id computed with them left out of the record), and a config.json without them
    (an older run) reads back as the same run."""
    config = make_run_config({"pool": "p", "lr": 1e-3, "batch_size": 8, "adam_beta1": 0.9})
    with_betas = run_id(config)
    older = {k: v for k, v in config_record(config).items() if k not in BETAS}
    assert make_run_config(older) == config

    def without_betas(function):
        return lambda c: {k: v for k, v in function(c).items() if k not in BETAS}

    monkeypatch.setattr(config_module, "run_identity", without_betas(config_module.run_identity))
    monkeypatch.setattr(config_module, "config_record", without_betas(config_module.config_record))
    assert run_id(config) == with_betas


def test_betas_enter_the_run_id_and_config_record_only_as_set():
    default = make_run_config({"pool": "p"})
    other = make_run_config({"pool": "p", "adam_beta2": "0.99"})
    assert (other.adam_beta1, other.adam_beta2) == (0.9, 0.99)
    assert config_record(other)["adam_beta2"] == 0.99
    assert config_record(default)["adam_beta2"] == 0.95
    assert run_id(other) != run_id(default)
    assert run_id(make_run_config({"pool": "p", "adam_beta1": 0.8})) not in (
        run_id(default),
        run_id(other),
    )


@pytest.mark.parametrize(
    "values,message",
    [
        ({"adam_beta1": 1.0}, "adam_beta1=1.0 is outside [0, 1)"),
        ({"adam_beta2": -0.1}, "adam_beta2=-0.1 is outside [0, 1)"),
        ({"adam_beta2": 1.5}, "adam_beta2=1.5 is outside [0, 1)"),
    ],
)
def test_betas_outside_zero_to_one_are_one_line_errors(values, message):
    with pytest.raises(ReproError) as error:
        check_fields(make_run_config(values))
    assert message in str(error.value) and "\n" not in str(error.value)
    check_fields(make_run_config({"adam_beta1": 0.0, "adam_beta2": 0.999}))  # the bounds' insides
