"""K configurations of one model shape trained at once (a cheaper sweep for small batches).

`stack_parameters` moves the parameters of K same-shaped models into one [K, ...] tensor per
parameter name and makes each model's parameters views of its slice. A step then runs one forward
and backward for all K through `torch.func.functional_call` with the stacked tensors
(repro.runtime.model applies stacked matrices with batched matmuls), hands each model its slice of
the gradients, and each model keeps its own AdamW, clipping, evaluation and checkpoint exactly as
a single run does. On CPU the result is bit-identical to K separate runs (tests/test_stacked.py).
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
    for name, _ in models[
        0
    ].named_parameters():  # a tied matrix appears once, as tok_embeddings.weight
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
    """Forward passes of the models in `active` (indices into `models`) as one stacked model."""

    def __init__(self, models: list[Transformer], stacked: dict[str, torch.Tensor]):
        self.models, self.stacked = models, stacked
        self.active = list(range(len(models)))
        self.leaves: dict[str, torch.Tensor] = {}

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] (the same batch for every config) -> logits [K_active, B, T, vocab]."""
        # fresh leaves per optimizer step; gradients accumulate over micro-batches
        if not self.leaves:
            every = len(self.active) == len(self.models)
            self.leaves = {
                n: (s if every else s[self.active]).detach().requires_grad_()
                for n, s in self.stacked.items()
            }
        return functional_call(self.models[0], self.leaves, (tokens,))

    def scatter_gradients(self) -> None:
        """Give each active model its slice of the stacked gradients (views, no copies)."""
        for j, k in enumerate(self.active):
            for name, param in self.models[k].named_parameters():
                param.grad = self.leaves[name].grad[j]
        self.leaves = {}

    def drop(self, k: int) -> None:
        """Stop training model k (it diverged or finished)."""
        self.active.remove(k)
