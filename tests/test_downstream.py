"""Downstream evaluation (lm-evaluation-harness) of a trained run, offline: a tiny multiple-choice
task defined locally (a task YAML over a local JSON file) and the adapter's log-likelihoods checked
against a direct computation with the model."""

import json
import shutil

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from repro.analysis.accuracy import follows_loss_claim  # noqa: E402
from repro.analysis.results import load_results  # noqa: E402
from repro.cli import main  # noqa: E402
from repro.data.pool import load_pool  # noqa: E402
from repro.errors import ReproError  # noqa: E402
from repro.runtime.config import make_run_config  # noqa: E402
from repro.runtime.train import train  # noqa: E402
from repro.store.downstream import ReproLM, evaluate_run, write_continuation_task  # noqa: E402

pytestmark = pytest.mark.slow  # real multi-process runs or lm-eval: CI runs it, `pytest` skips it

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


def test_a_request_scores_its_continuation_given_its_context(trained_run):
    """lm-eval's requests (context, continuation): the continuation alone is scored, and trailing
    spaces of the context move to the continuation."""
    lm = ReproLM(trained_run)
    requests = [
        Instance("loglikelihood", {}, (q, c), 0) for q, choices, _ in QUESTIONS for c in choices
    ]
    requests.append(Instance("loglikelihood", {}, ("A small dog ", "ran away."), 0))
    expected = [(lm._encode(q), lm._encode(c)) for q, choices, _ in QUESTIONS for c in choices]
    expected.append((lm._encode("A small dog"), lm._encode(" ran away.")))
    assert lm.loglikelihood(requests) == lm.score(expected)


def test_repro_eval_on_a_local_task_writes_accuracy(trained_run, local_task, capsys):
    main(["eval", str(trained_run), "--tasks", "repro_tiny_mc", "--include", str(local_task)])
    result = json.loads((trained_run / "downstream.json").read_text())["repro_tiny_mc"]
    assert result["n"] == len(QUESTIONS) and 0 <= result["acc"] <= 1 and result["acc_stderr"] >= 0
    assert "repro_tiny_mc" in capsys.readouterr().out


def test_repro_eval_merges_into_downstream_json(trained_run, local_task, tmp_path):
    """Earlier tasks' results are kept; a task evaluated again replaces its own entry only."""
    run = shutil.copytree(trained_run, tmp_path / "run")
    earlier = {"other_task": {"acc": 0.5, "acc_stderr": 0.1, "n": 10}}
    stale = {"repro_tiny_mc": {"acc": 2.0, "acc_stderr": 0.0, "n": 1}}
    (run / "downstream.json").write_text(json.dumps(earlier | stale))
    main(["eval", str(run), "--tasks", "repro_tiny_mc", "--include", str(local_task)])
    merged = json.loads((run / "downstream.json").read_text())
    assert merged["other_task"] == earlier["other_task"]
    assert merged.keys() == {"other_task", "repro_tiny_mc"}
    assert merged["repro_tiny_mc"]["n"] == len(QUESTIONS)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"", "is empty"), (b'{"qa_b": 5}', "holds a task whose result is not an object")],
)
def test_a_damaged_downstream_json_is_one_line_naming_it(trained_run, tmp_path, content, problem):
    """Refused before any task loads: an evaluation never merges into (and so keeps) a bad entry."""
    run = shutil.copytree(trained_run, tmp_path / "run")
    (run / "downstream.json").write_bytes(content)
    with pytest.raises(ReproError) as error:
        evaluate_run(run, ["no_such_task_here"])
    path = run / "downstream.json"
    assert str(error.value) == f"{path} {problem}; remove it and evaluate the run again " + (
        f"(repro eval {run})"
    )


def test_a_folder_that_is_not_a_run_is_refused_before_any_task_loads(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ReproError, match=f"^{tmp_path} is not a run \\(it has no config.json\\)"):
        evaluate_run(tmp_path, ["no_such_task_here"])


@pytest.mark.parametrize("option", [["--batch-size", "0"], ["--limit", "-1"]])
def test_batch_size_and_limit_must_be_positive(trained_run, option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", str(trained_run), "--tasks", "no_such_task_here", *option])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert "--batch-size (sequences) and --limit (examples per task) must be at least 1" in err


def test_a_task_whose_data_cannot_be_fetched_gets_a_one_line_error(trained_run, local_task):
    with pytest.raises(ReproError, match="task no_such_task_here could not be loaded") as error:
        evaluate_run(trained_run, ["no_such_task_here"], include=local_task)
    assert "\n" not in str(error.value)


def test_a_continuation_longer_than_the_sequence_length_is_refused(trained_run):
    lm = ReproLM(trained_run)
    with pytest.raises(ReproError, match="continuation of 65 tokens is longer than the run's"):
        lm.score([([1, 2], list(range(65)))])


def _endpoints(acc_by_batch, se=0.01, loss_by_batch=None):
    """Hand-made tuned endpoints of one model on two pools."""
    loss_by_batch = loss_by_batch or {1: 3.0, 4: 2.9, 16: 3.1}
    return pd.DataFrame(
        [
            {
                "model": "m",
                "pool": pool,
                "batch_size": b,
                "val_loss": loss_by_batch[b],
                "t acc": acc,
                "t acc_stderr": se,
            }
            for pool in ("p0", "p1")
            for b, acc in acc_by_batch.items()
        ]
    )


@pytest.mark.parametrize(
    "acc,verdict",
    [
        ({1: 0.5, 4: 0.6, 16: 0.4}, "agrees"),  # lowest loss (4) most accurate, highest (16) least
        ({1: 0.5, 4: 0.4, 16: 0.6}, "disagrees"),
        ({1: 0.5, 4: 0.505, 16: 0.5}, "undetermined"),  # within the interval
    ],
)
def test_accuracy_follows_loss_in_all_three_directions(acc, verdict):
    claim = follows_loss_claim(_endpoints(acc), "t", "m")
    assert claim.key == "accuracy-follows-loss/t" and claim.claim.endswith("(t)")
    assert claim.verdict == verdict
    assert "batch 4 (lowest loss) - batch 16 (highest)" in claim.measured


def test_accuracy_within_noise_of_chance_is_undetermined():
    near_chance = {1: 0.26, 4: 0.27, 16: 0.10}  # pool_continuation: chance 0.25
    frame = _endpoints(near_chance, se=0.02).rename(
        columns={"t acc": "pool_continuation acc", "t acc_stderr": "pool_continuation acc_stderr"}
    )
    claim = follows_loss_claim(frame, "pool_continuation", "m")
    assert claim.verdict == "undetermined" and "within noise of chance" in claim.measured


def test_the_pool_task_asks_which_span_continues_a_validation_document(synthetic_pool, tmp_path):
    folder = write_continuation_task(synthetic_pool, tmp_path, questions=20)
    rows = [json.loads(line) for line in (folder / "pool_continuation.jsonl").open()]
    assert len(rows) == 20 and all(len(r["choices"]) == 4 for r in rows)
    val = load_pool(synthetic_pool).val.tokens.tolist()
    tokenizer = Tokenizer.from_file(str(synthetic_pool / "tokenizer.json"))
    text = tokenizer.decode(val)
    for r in rows[:5]:  # the true answer continues its context in a validation document
        assert r["context"] + r["choices"][r["answer"]] in text
    assert {r["answer"] for r in rows} == {0, 1, 2, 3}


def test_evaluations_join_the_runs_table(trained_run, local_task):
    evaluate_run(trained_run, ["repro_tiny_mc"], include=local_task)
    runs, _ = load_results(trained_run.parent)
    assert runs.loc[0, "repro_tiny_mc n"] == len(QUESTIONS)
    assert 0 <= runs.loc[0, "repro_tiny_mc acc"] <= 1
