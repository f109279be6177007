"""K runs of one model shape trained at once (a cheaper sweep for small batches).

`stack_parameters` moves the parameters of K same-shaped models into one [K, ...] tensor per
parameter name and makes each model's parameters views of its slice. A step then runs one forward
and backward for all K through `torch.func.functional_call` with the stacked tensors
(repro.runtime.model applies stacked matrices with batched matmuls, model k to its own tokens),
hands each model its slice of the gradients, and each model keeps its own data, schedule, AdamW,
clipping, evaluation and checkpoint exactly as a single run does. On CPU the result is
bit-identical to K separate runs (tests/test_stacked.py).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.func import functional_call

from repro.runtime.model import Transformer


def stack_parameters(models: list[Transformer]) -> dict[str, torch.Tensor]:
    """Stack the parameters of `models` (same shape) into {name: [K, ...]} storages; afterwards
    models[k]'s parameters are slice k of them. Tied matrices are stacked once and stay tied."""
    stacked: dict[str, torch.Tensor] = {}
    # a tied matrix appears once, as tok_embeddings.weight
    for name, _ in models[0].named_parameters():
        storage = torch.stack([m.get_parameter(name).detach() for m in models])
        module_name, _, attr = name.rpartition(".")
        for k, model in enumerate(models):
            setattr(model.get_submodule(module_name), attr, nn.Parameter(storage[k]))
        stacked[name] = storage
    for model in models:
        if model.config.tie_embeddings:
            model.output.weight = model.tok_embeddings.weight
    return stacked


class StackedForward:
    """Forward passes of the models still training, as one stacked model."""

    def __init__(self, models: list[Transformer], stacked: dict[str, torch.Tensor]):
        self.models, self.stacked = list(models), stacked
        self.leaves: dict[str, torch.Tensor] = {}
        # each model's (name, parameter) pairs, listed once: walking its modules every step costs
        self.named = {model: list(model.named_parameters()) for model in self.models}

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [K, B, T] (model k's own batch) -> logits [K, B, T, vocab]."""
        # fresh leaves per optimizer step; gradients accumulate over micro-batches
        if not self.leaves:
            self.leaves = {n: s.detach().requires_grad_() for n, s in self.stacked.items()}
        return functional_call(self.models[0], self.leaves, (tokens,))

    def scatter_gradients(self) -> None:
        """Give each model its slice of the stacked gradients (views, no copies)."""
        for k, model in enumerate(self.models):
            for name, param in self.named[model]:
                param.grad = self.leaves[name].grad[k]
        self.leaves = {}

    def drop(self, model: Transformer) -> None:
        """Stop training `model` (it diverged or finished): the others move to smaller storages,
        their parameters (and so their optimizers' references) unchanged as objects."""
        self.models.remove(model)
        del self.named[model]
        if not self.models:
            return
        for name in self.stacked:
            params = [m.get_parameter(name) for m in self.models]
            storage = torch.stack([p.detach() for p in params])
            for k, param in enumerate(params):
                param.data = storage[k]
            self.stacked[name] = storage
