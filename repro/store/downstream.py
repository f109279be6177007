"""Downstream evaluation of a trained run with lm-evaluation-harness (`repro eval RUN --tasks ...`).

`ReproLM` serves a run's final checkpoint and its pool's tokenizer as an lm-eval model: the
log-likelihood of each continuation given its context, in batches, on CPU or CUDA. Multiple-choice
tasks (ARC-Easy, PIQA, SciQ, ...) need nothing else; tasks that generate text are refused.
`evaluate_run` merges into RUN/downstream.json: per task, accuracy, its standard error and the
number of examples (a task evaluated again replaces its own entry only). Task data come from the
Hugging Face hub unless a task is defined locally (`include`: a folder of lm-eval task YAML files,
e.g. over a local JSON file).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from repro.data.tokenizer import load_tokenizer
from repro.errors import ReproError
from repro.runtime.member import load_final_model
from repro.runtime.run_dir import RunDir


class ReproLM(LM):
    """A repro run as an lm-eval model (log-likelihoods only). Contexts are cut from the left to
    the run's sequence length (tokens)."""

    def __init__(self, run: str | Path, device: str = "cpu", batch_size: int = 16) -> None:
        super().__init__()
        self.model, config, pool = load_final_model(Path(run), torch.device(device))
        self.tokenizer = load_tokenizer(str(pool.path.resolve()))
        self.eos_id = pool.eos_id
        self.max_length = config.seq_len
        self.batch_size = batch_size
        self.torch_device = torch.device(device)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        """(sum of log p(continuation tokens | context), whether each is the greedy choice)."""
        pairs = []
        for request in requests:
            context, continuation = request.args
            cut = len(context.rstrip())  # trailing spaces go with the answer
            context, continuation = context[:cut], context[cut:] + continuation
            context_ids = self._encode(context) if context else [self.eos_id]
            pairs.append((context_ids, self._encode(continuation)))
        return self.score(pairs)

    def loglikelihood_rolling(self, requests) -> list[float]:
        """Log-likelihood of whole texts, in disjoint windows of the sequence length."""
        results = []
        for request in requests:
            windows = get_rolling_token_windows(
                self._encode(request.args[0]), self.eos_id, self.max_length, 1
            )
            pairs = [make_disjoint_window(w) for w in windows]
            results.append(sum(logp for logp, _ in self.score(pairs)))
        return results

    def generate_until(self, requests) -> list[str]:
        raise ReproError(
            "repro eval scores multiple-choice (log-likelihood) tasks; this task generates text"
        )

    @torch.no_grad()
    def score(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(log-likelihood, greedy) of each (context ids, continuation ids), `batch_size` at a
        time, right-padded; the context cut from the left so that both fit the sequence length."""
        longest = max((len(t) for _, t in pairs), default=0)
        if longest > self.max_length:
            raise ReproError(
                f"a continuation of {longest} tokens is longer than the run's sequence length "
                f"({self.max_length} tokens); evaluate a run trained on longer sequences"
            )
        results = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start : start + self.batch_size]
            sequences = [(c + t)[-(self.max_length + 1) :] for c, t in chunk]
            width = max(len(s) for s in sequences) - 1
            inputs = torch.zeros(len(chunk), width, dtype=torch.long)
            for i, s in enumerate(sequences):
                inputs[i, : len(s) - 1] = torch.tensor(s[:-1])
            logprobs = F.log_softmax(self.model(inputs.to(self.torch_device)).float(), dim=-1).cpu()
            for i, ((_, target), s) in enumerate(zip(chunk, sequences)):
                end = len(s) - 1
                rows = logprobs[i, end - len(target) : end]
                wanted = torch.tensor(target)
                picked = rows.gather(1, wanted[:, None]).squeeze(1)
                results.append((float(picked.sum()), bool((rows.argmax(-1) == wanted).all())))
        return results


def evaluate_run(
    run: str | Path,
    tasks: list[str],
    include: str | Path | None = None,
    limit: int | None = None,
    device: str = "auto",
    batch_size: int = 16,
) -> dict:
    """Evaluate `run` on `tasks` with lm-eval and merge the results into RUN/downstream.json (other
    tasks' results kept); returns these tasks' results: {task: {"acc", "acc_stderr", "n"}}. device
    "auto": a GPU when one is visible, else the CPU."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    if batch_size < 1 or (limit is not None and limit < 1):
        raise ReproError(
            f"--batch-size (sequences) and --limit (examples per task) must be at least 1; got "
            f"{batch_size} and {limit}"
        )
    folder = RunDir(run)
    if not folder.has_config():
        raise ReproError(
            f"{run} is not a run (it has no config.json); pass a folder that repro train or "
            "repro sweep run trained"
        )
    earlier = folder.downstream()

    local = {path.stem for path in Path(include).glob("*.yaml")} if include else set()
    manager = TaskManager(  # lm-eval's own task index (seconds to build) only when needed
        include_path=str(include) if include else None, include_defaults=not set(tasks) <= local
    )
    for task in tasks:  # each task's data before any scoring: a one-line error naming it
        try:
            manager.load([task])
        except Exception as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ReproError(
                f"task {task} could not be loaded ({first[:200]}); it needs its data from the "
                "Hugging Face hub (network) or a local task definition (--include DIR)"
            ) from None
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = ReproLM(run, device, batch_size)
    output = simple_evaluate(model=model, tasks=tasks, task_manager=manager, limit=limit)
    results = {
        task: {
            "acc": float(values["acc,none"]),
            "acc_stderr": _number(values.get("acc_stderr,none")),
            "n": int(output["n-samples"][task]["effective"]),
        }
        for task, values in output["results"].items()
        if task in output["n-samples"] and "acc,none" in values  # tasks, not their groups
    }
    folder.write_downstream(earlier | results)
    return results


def _number(value) -> float:
    """lm-eval's standard error: a number, or "N/A" (one example) as NaN."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


POOL_TASK = "pool_continuation"  # the local task write_continuation_task defines


def write_continuation_task(
    pool: str | Path,
    folder: str | Path,
    questions: int = 200,
    context_tokens: int = 24,
    answer_tokens: int = 8,
    choices: int = 4,
    seed: int = 0,
) -> Path:
    """A local multiple-choice task from a pool's validation documents (never trained on): which of
    `choices` spans of `answer_tokens` tokens continues `context_tokens` tokens of a document (the
    others: spans from random places of the validation documents). Writes
    <folder>/pool_continuation.{jsonl,yaml}; returns the folder (lm-eval's include path)."""
    from repro.data.pool import load_pool

    data = load_pool(pool)
    tokenizer = load_tokenizer(str(Path(pool).resolve()))
    starts, ends = data.val.doc_offsets[:-1], data.val.doc_offsets[1:]
    usable = np.flatnonzero(ends - starts >= context_tokens + answer_tokens)
    if not len(usable):
        raise ReproError(
            f"{pool}: no validation document of {context_tokens + answer_tokens} tokens"
        )
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(questions):
        doc, *others = rng.choice(usable, size=choices)
        true = _span(data.val.tokens, starts[doc], ends[doc], rng, context_tokens + answer_tokens)
        answer = int(rng.integers(choices))
        options = [
            _other_span(data.val.tokens, starts[d], ends[d], rng, true[context_tokens:])
            for d in others
        ]
        options.insert(answer, true[context_tokens:])
        rows.append(
            {
                "context": tokenizer.decode(true[:context_tokens].tolist()),
                "choices": [tokenizer.decode(o.tolist()) for o in options],
                "answer": answer,
            }
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{POOL_TASK}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{POOL_TASK}.yaml").write_text(_task_yaml(folder / f"{POOL_TASK}.jsonl"))
    return folder


def _span(tokens: np.ndarray, start: int, end: int, rng, length: int) -> np.ndarray:
    """`length` tokens at a random place of the document tokens[start:end]."""
    at = int(rng.integers(start, end - length + 1))
    return tokens[at : at + length]


def _other_span(tokens: np.ndarray, start: int, end: int, rng, answer: np.ndarray) -> np.ndarray:
    """A span as long as `answer` from the document tokens[start:end] that differs from it."""
    for _ in range(100):
        span = _span(tokens, start, end, rng, len(answer))
        if not np.array_equal(span, answer):
            return span
    raise ReproError("the validation documents repeat one span; too few of them for a task")


def _task_yaml(data: Path) -> str:
    return (
        f"task: {POOL_TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        'target_delimiter: ""\n'  # the answer continues the context's last token as it is
        'doc_to_text: "{{context}}"\n'
        'doc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )
