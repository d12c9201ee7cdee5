"""Random token batches, identical on every rank, split by rank.

Every rank draws the whole global batch for a step from a CPU ``torch.Generator`` seeded with
``(seed, step)`` and keeps its own contiguous slice of rows, so N ranks together see exactly the
batch one process would see.
"""

from __future__ import annotations

import torch

# Separates the seed from the step so (seed, step) pairs never share a generator state.
_STEP_STRIDE = 1_000_003


def global_batch(
    step: int, batch_size: int, context_length: int, vocab_size: int, seed: int
) -> torch.Tensor:
    """Tokens ``(batch_size, context_length + 1)`` for ``step``: inputs plus shifted targets."""
    gen = torch.Generator(device="cpu").manual_seed(seed * _STEP_STRIDE + step)
    return torch.randint(vocab_size, (batch_size, context_length + 1), generator=gen)


def rank_slice(tokens: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rows of the global batch that ``rank`` trains on."""
    if tokens.shape[0] % world_size:
        raise ValueError(f"batch of {tokens.shape[0]} does not split over {world_size} ranks")
    per_rank = tokens.shape[0] // world_size
    return tokens[rank * per_rank : (rank + 1) * per_rank]


def inputs_and_targets(
    tokens: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``[:, :-1]`` and targets ``[:, 1:]`` of ``(b, t + 1)`` tokens, on ``device``."""
    tokens = tokens.to(device, non_blocking=True)
    return tokens[:, :-1], tokens[:, 1:]
