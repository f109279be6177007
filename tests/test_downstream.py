"""Downstream evaluation (lm-evaluation-harness) of a trained run, offline: a tiny multiple-choice
task defined locally (a task YAML over a local JSON file) and the adapter's log-likelihoods checked
against a direct computation with the model."""

import json

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("lm_eval")

from repro.cli import main  # noqa: E402
from repro.downstream import ReproLM, evaluate_run  # noqa: E402
from repro.errors import ReproError  # noqa: E402
from repro.runtime.config import make_run_config  # noqa: E402
from repro.runtime.train import train  # noqa: E402

QUESTIONS = [
    ("The king of the old city", [" walked home.", " the the the", " of of."], 0),
    ("A small dog", [" ran to the river.", " river the ran", " . . ."], 0),
    ("In the morning the people", [" went to the market.", " market market", " the, the,"], 0),
    ("She said that", [" the story was true.", " true story the was", " was was"], 0),
]


@pytest.fixture(scope="module")
def trained_run(synthetic_pool, tmp_path_factory):
    run = tmp_path_factory.mktemp("eval") / "run"
    fields = {"pool": str(synthetic_pool), "model": "tiny", "seq_len": 64, "batch_size": 8}
    train(make_run_config(fields | {"epochs": 1, "eval_every": 1.0}), run, progress=False)
    return run


@pytest.fixture
def local_task(tmp_path):
    """A 4-question multiple-choice task: a task YAML over a local JSON-lines file."""
    data = tmp_path / "tiny_mc.jsonl"
    rows = [{"question": q, "choices": c, "answer": a} for q, c, a in QUESTIONS]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tiny_mc.yaml").write_text(
        "task: repro_tiny_mc\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return tmp_path


def _direct(model, ids, n_target):
    """log p(last n_target ids | the ones before) by one plain forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]]))[0]
    logprobs = F.log_softmax(logits.float(), dim=-1)[-n_target:]
    return float(logprobs.gather(1, torch.tensor(ids[-n_target:])[:, None]).sum())


def test_the_adapters_log_likelihoods_match_the_model(trained_run):
    lm = ReproLM(trained_run, batch_size=3)  # batches of 3: padding and a ragged last batch
    pairs = [(lm._encode(q), lm._encode(c)) for q, choices, _ in QUESTIONS for c in choices]
    pairs.append((list(range(5, 85)), [7, 8, 9]))  # longer than seq_len 64: cut from the left
    scored = lm.score(pairs)
    for (context, target), (logp, _) in zip(pairs, scored, strict=True):
        ids = (context + target)[-(lm.max_length + 1) :]
        assert logp == pytest.approx(_direct(lm.model, ids, len(target)), abs=1e-4)


def test_repro_eval_on_a_local_task_writes_accuracy(trained_run, local_task, capsys):
    main(["eval", str(trained_run), "--tasks", "repro_tiny_mc", "--include", str(local_task)])
    result = json.loads((trained_run / "downstream.json").read_text())["repro_tiny_mc"]
    assert result["n"] == len(QUESTIONS) and 0 <= result["acc"] <= 1 and result["acc_stderr"] >= 0
    assert "repro_tiny_mc" in capsys.readouterr().out


def test_a_task_whose_data_cannot_be_fetched_gets_a_one_line_error(trained_run, local_task):
    with pytest.raises(ReproError, match="task no_such_task_here could not be loaded") as error:
        evaluate_run(trained_run, ["no_such_task_here"], include=local_task)
    assert "\n" not in str(error.value)


def test_a_continuation_longer_than_the_sequence_length_is_refused(trained_run):
    lm = ReproLM(trained_run)
    with pytest.raises(ReproError, match="continuation of 65 tokens is longer than the run's"):
        lm.score([([1, 2], list(range(65)))])
