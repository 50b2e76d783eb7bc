"""TRELM 3.3: dynamic knowledge routing — integrated-gradient attribution of FFN neurons (eq. 9–11) and training
only the knowledge paths through the top neurons (eq. 12)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from .families import encoder_blocks, ffn_paths
from .zero3 import gathered

logger = logging.getLogger(__name__)


class RoutedLinear(nn.Linear):
    """A frozen ``nn.Linear`` whose routed rows (``axis="out"``: the output units, e.g. an FFN's intermediate
    neurons in its first layer) or columns (``axis="in"``: the FFN's second layer, read from those neurons) train
    through a small delta: ``y = x·Wᵀ + b + Δ`` on the routed units only.

    The weight keeps its name and shape (checkpoints load and save unchanged; :meth:`fold` merges the delta in), it
    takes no gradient and the optimizer holds no state for it, so backward skips its weight gradient and the
    optimizer step touches only ``k·d`` values per layer.
    """

    def __init__(self, linear: nn.Linear, axis: str, num_routed: int):
        nn.Module.__init__(self)
        self.in_features, self.out_features, self.axis = linear.in_features, linear.out_features, axis
        self.weight, self.bias = linear.weight, linear.bias
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        size = self.out_features if axis == "out" else self.in_features
        other = self.in_features if axis == "out" else self.out_features
        if not 1 <= num_routed <= size:
            raise ValueError(f"cannot route {num_routed} of {size} units")
        factory = {"device": self.weight.device, "dtype": self.weight.dtype}
        self.register_buffer("route_index", torch.arange(num_routed, device=self.weight.device))
        self.route_weight = nn.Parameter(torch.zeros(num_routed, other, **factory))
        self.route_bias = (
            nn.Parameter(torch.zeros(num_routed, **factory)) if axis == "out" and self.bias is not None else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = nn.functional.linear(x, self.weight, self.bias)
        if self.axis == "out":  # rows of W: extra output on the routed units
            extra = nn.functional.linear(x, self.route_weight, self.route_bias)
            return out.index_add(-1, self.route_index, extra)
        # columns of W: the routed inputs contribute through the delta
        return out + nn.functional.linear(x.index_select(-1, self.route_index), self.route_weight.t())

    @torch.no_grad()
    def fold(self) -> None:
        """Merge the delta into the weight (the function is unchanged) and zero it (on gathered parameters under
        DeepSpeed ZeRO-3; the optimizer's own copy of the delta is reset by :func:`reset_optimizer_state`)."""
        with gathered(self, modify=True):
            self._fold()

    def _fold(self) -> None:
        if self.axis == "out":
            self.weight.index_add_(0, self.route_index, self.route_weight)
            if self.route_bias is not None:
                self.bias.index_add_(0, self.route_index, self.route_bias)
                self.route_bias.zero_()
        else:
            self.weight.index_add_(1, self.route_index, self.route_weight.t())
        self.route_weight.zero_()

    def route(self, index: torch.Tensor) -> None:
        """Fold the current delta and route ``index`` (same count) from now on."""
        if index.shape != self.route_index.shape:
            raise ValueError(f"route {index.shape[0]} units, this layer routes {self.route_index.shape[0]}")
        self.fold()
        self.route_index.copy_(index)

    def delta_parameters(self) -> list[nn.Parameter]:
        return [p for p in (self.route_weight, self.route_bias) if p is not None]


def integrated_gradients(
    function: Callable[[list[torch.Tensor]], torch.Tensor],
    activations: list[torch.Tensor],
    steps: int,
    batch_steps: int | None = None,
) -> list[torch.Tensor]:
    """Eq. (10)–(11), batched: ``v̄ · (1/m) Σ_k ∂F(k/m · v̄)/∂v`` for every activation tensor in ``activations``.

    ``function`` maps the activations, each given with a leading axis of scales ``k/m`` (shape [s, *v̄.shape]), to
    one value per scale ([s]). The m Riemann steps run as one batched call, or ``batch_steps`` at a time (the same
    sum; a batched call holds the activations of s copies of the batch, so large batches need a smaller s).
    Returns one attribution per activation, shaped like it.
    """
    if batch_steps is not None and batch_steps < 1:
        raise ValueError(f"batch_steps must be >= 1, got {batch_steps}")
    alphas = torch.arange(1, steps + 1, device=activations[0].device, dtype=torch.float32) / steps
    totals = [torch.zeros_like(v, dtype=torch.float32) for v in activations]
    for part in alphas.split(batch_steps or steps):
        scaled = [
            (part.view(-1, *([1] * v.dim())) * v.detach().float().unsqueeze(0)).requires_grad_() for v in activations
        ]
        grads = torch.autograd.grad(function(scaled).sum(), scaled)
        for total, grad in zip(totals, grads):
            total.add_(grad.sum(0))
    return [v.detach().float() * total / steps for v, total in zip(activations, totals)]


def ffn_modules(encoder: nn.Module, num_layers: int) -> list[tuple[nn.Module, nn.Module, str, nn.Module, str]]:
    """Per layer: (the module whose output is the FFN's post-activation intermediate state, then (parent, attribute)
    of the FFN's first and of its second linear layer); BERT naming ``intermediate`` / ``intermediate.dense`` /
    ``output.dense``, other families' in ``keplm.modeling.families``."""
    modules = []
    for block in encoder_blocks(encoder, num_layers):
        hook, (first_parent, first_name), (second_parent, second_name) = ffn_paths(block)
        modules.append((hook, first_parent, first_name, second_parent, second_name))
    return modules


class KnowledgeRouter:
    """TRELM 3.3: finds the knowledge paths of a batch and trains only them.

    :meth:`attribute` scores every FFN intermediate neuron by integrated gradients of the probability of the
    correct knowledge tokens (eq. 9–11; the m Riemann steps as one batched pass, the intermediate activations of
    all layers scaled together along one straight path, so the attributions of all neurons add up to the change of
    the probability — completeness — in one pass instead of one pass per layer). :meth:`route` keeps the top
    neurons per layer: the knowledge path input → neuron → output (eq. 12) is the neuron's row (and bias) in the
    FFN's first linear layer and its column in the second (:class:`RoutedLinear`).
    """

    def __init__(self, encoder: nn.Module, num_layers: int, fraction: float):
        self.layers = []
        for intermediate, parent_in, name_in, output, name_out in ffn_modules(encoder, num_layers):
            first, second = getattr(parent_in, name_in), getattr(output, name_out)
            count = max(1, round(fraction * first.out_features))
            if not isinstance(first, RoutedLinear):
                first = RoutedLinear(first, "out", count)
                setattr(parent_in, name_in, first)
            if not isinstance(second, RoutedLinear):
                second = RoutedLinear(second, "in", count)
                setattr(output, name_out, second)
            self.layers.append((intermediate, first, second))
        self.last_scores: list[torch.Tensor] | None = None

    def delta_parameters(self) -> list[nn.Parameter]:
        return [p for _, first, second in self.layers for p in (*first.delta_parameters(), *second.delta_parameters())]

    def fold(self) -> None:
        for _, first, second in self.layers:
            first.fold()
            second.fold()

    def route_indices(self) -> list[torch.Tensor]:
        return [first.route_index.clone() for _, first, _ in self.layers]

    def set_route_indices(self, indices: list[torch.Tensor], optimizer: torch.optim.Optimizer | None = None) -> None:
        """Route the given neurons per layer; the optimizer's state for the deltas is reset (new rows)."""
        if len(indices) != len(self.layers):
            raise ValueError(f"{len(indices)} index tensors for {len(self.layers)} routed layers")
        for (_, first, second), index in zip(self.layers, indices):
            first.route(index.to(first.route_index.device))
            second.route(index.to(second.route_index.device))
        if optimizer is not None:
            reset_optimizer_state(optimizer, self.delta_parameters())

    def attribute(
        self,
        run: Callable[[], torch.Tensor],
        positions: tuple[torch.Tensor, torch.Tensor],
        steps: int,
        repeat: Callable[[int], Callable[[], torch.Tensor]],
        batch_steps: int | None = None,
    ) -> list[torch.Tensor]:
        """Attribution of every intermediate neuron of every layer ([layers] tensors of [I]).

        ``run()`` runs the model on the batch and returns p(y*) per target; ``positions`` (rows, columns) are the
        targets' token positions; ``repeat(m)`` returns a function that runs the batch repeated m times (scale-major)
        and returns p(y*) as [m·N]. The activations at the target positions are recorded by one plain pass, then
        replaced by their scaled copies in the batched pass(es): all ``steps`` at once, or ``batch_steps`` at a time.
        """
        rows, cols = positions
        recorded: list[torch.Tensor] = []
        handles = [
            intermediate.register_forward_hook(lambda m, a, out: recorded.append(out[rows, cols].detach()))
            for intermediate, _, _ in self.layers
        ]
        try:
            with torch.no_grad():
                run()
        finally:
            for handle in handles:
                handle.remove()

        def scaled_run(scaled: list[torch.Tensor]) -> torch.Tensor:
            steps_ = scaled[0].shape[0]

            def hook(index):
                def replace(module, args, out):
                    size = out.shape[0] // steps_
                    all_rows = torch.arange(steps_, device=out.device).repeat_interleave(
                        rows.numel()
                    ) * size + rows.repeat(steps_)
                    out = out.clone()
                    out[all_rows, cols.repeat(steps_)] = scaled[index].reshape(-1, out.shape[-1]).to(out.dtype)
                    return out

                return replace

            handles = [
                intermediate.register_forward_hook(hook(i)) for i, (intermediate, _, _) in enumerate(self.layers)
            ]
            try:
                probabilities = repeat(steps_)()
            finally:
                for handle in handles:
                    handle.remove()
            return probabilities.view(steps_, -1).sum(-1)

        attributions = integrated_gradients(scaled_run, recorded, steps, batch_steps)
        scores = [a.sum(0) for a in attributions]  # over the targets of the batch
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            for score in scores:  # every rank routes the same neurons
                torch.distributed.all_reduce(score)
        self.last_scores = scores
        return scores

    def route(self, scores: list[torch.Tensor], optimizer: torch.optim.Optimizer | None = None) -> list[torch.Tensor]:
        """Route the top-scoring neurons of each layer (as many as each layer routes); returns their indices."""
        indices = [
            score.topk(first.route_index.numel()).indices.sort().values
            for score, (_, first, _) in zip(scores, self.layers)
        ]
        self.set_route_indices(indices, optimizer)
        return indices


def reset_optimizer_state(optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter]) -> None:
    """Forget the optimizer's moments for ``parameters`` (their rows now stand for other neurons)."""
    if not _is_deepspeed(optimizer):  # accelerate's wrapper (around a torch optimizer or a DeepSpeed one)
        optimizer = getattr(optimizer, "optimizer", optimizer)
    if _is_deepspeed(optimizer):
        _reset_deepspeed_state(optimizer, parameters)
        return
    # keplm's CombinedOptimizer (main + the parameter groups' own optimizers) or a plain optimizer
    optimizers = [optimizer.main, *optimizer.others] if hasattr(optimizer, "main") else [optimizer]
    targets = {id(p) for p in parameters}
    for opt in optimizers:
        for parameter in list(opt.state):
            if id(parameter) in targets:
                opt.state.pop(parameter)


def _is_deepspeed(optimizer) -> bool:
    """Whether ``optimizer`` is one of DeepSpeed's ZeRO optimizers (not the torch optimizer inside one)."""
    return type(optimizer).__module__.startswith("deepspeed.")


def _reset_deepspeed_state(optimizer, parameters: list[nn.Parameter]) -> None:
    """Under DeepSpeed ZeRO the optimizer steps its own fp32 copy of each parameter and writes it back after the step:
    zeroing the module's delta alone would let the old delta return (and grow). Its copy and every moment the
    optimizer keeps (Adam's two, SGD's momentum) are zeroed here. DeepSpeed keeps one step count per flattened group,
    so Adam's bias correction goes on from it (torch's Adam, whose state is dropped, starts the deltas' count again)."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_set_full_fp32_param, safe_set_full_optimizer_state

    inner = getattr(optimizer, "optimizer", None)
    moments = sorted(
        {
            key
            for state in getattr(inner, "state", {}).values()
            for key, value in state.items()
            if key != "step" and isinstance(value, torch.Tensor)
        }
    )
    for parameter in parameters:
        zeros = torch.zeros_like(safe_get_full_fp32_param(parameter))
        safe_set_full_fp32_param(parameter, zeros)
        for key in moments:  # none before the first step
            safe_set_full_optimizer_state(parameter, zeros, key)


__all__ = ["RoutedLinear", "KnowledgeRouter", "integrated_gradients", "ffn_modules", "reset_optimizer_state"]
