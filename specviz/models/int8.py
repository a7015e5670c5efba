"""A cheaper draft body: int8 weights with dynamic int8 activations (``--draft-quant int8``).

Every ``nn.Linear`` of a float32 copy of the draft becomes PyTorch's dynamic int8
linear (``torch.ao.quantization.quantize_dynamic``, qint8 weights with one scale per
output channel, activations quantized per call): int8 x int8 matrix products on the
CPU's x86 / fbgemm kernels. Embeddings and norms stay float32.

The draft only proposes; the target decides. So, as with a cut head, the output is
exactly the target's: greedy accepts a token iff it is the target's argmax, and in
sampling mode the acceptance rule uses the q the int8 draft really sampled from.
Only c and how often the draft is right change.

Measured on a 2-core EPYC (bf16 pair, code prompt, one draft pass at context 200):
the bf16 draft 74 ms, this int8 draft 30 ms (c 0.40 -> 0.16). torchao 0.18's CPU
paths were slower than bf16 here (int8 weight-only 170-180 ms, dynamic int8 160 ms),
so this uses PyTorch's own kernels. One scale per output row instead of one per tensor
costs the same (c 0.18 either way) and keeps the draft closer to its bf16 self: at
gamma 4 acceptance went 0.26 -> 0.37 on a prose prompt and 0.27 -> 0.43 on a Chinese
one (0.70 -> 0.64 on code). PyTorch marks its quantized tensors deprecated
(pytorch/pytorch#184982); requirements.txt pins the torch this was measured on.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch.ao.quantization import per_channel_dynamic_qconfig


def _quantize(module: torch.nn.Module) -> torch.nn.Module:
    with warnings.catch_warnings():  # the deprecation notice, once per process, says nothing new here
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(
            module, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)


def int8_model(model: torch.nn.Module) -> torch.nn.Module:
    """A float32 copy of ``model`` with every Linear (the LM head too) dynamic int8.
    The original is untouched. Takes seconds (7 s for a 0.5B draft on 2 cores)."""
    return _quantize(copy.deepcopy(model).float().eval())


def int8_linear(weight: torch.Tensor) -> torch.nn.Module:
    """A dynamic int8 linear map x -> x @ weight.T (no bias), for a cut LM head."""
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight.float())
    return _quantize(torch.nn.Sequential(linear))[0]
