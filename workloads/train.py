"""Train the Transformer LM with one DDP variant and record its timing (and traces).

Launch (one process per GPU, or per CPU rank with gloo):
    torchrun --standalone --nproc-per-node 2 -m workloads.train --variant bucketed \
        --model-size xl --steps 10 --warmup-steps 3 --batch-size 8 --context-length 128 \
        --bucket-mb 25 --profile torch --out runs/xl-bucketed
Without torchrun, ``python -m workloads.train ...`` runs a single rank.
Rank 0 writes timing.json, timing.csv and timing-summary.csv into --out; with
``--profile torch`` every rank writes rank-<r>.trace.json.gz there too.
Backend: NCCL on cuda:LOCAL_RANK when CUDA is available, else gloo on the CPU.
Where torchrun is not on PATH, ``python -m torch.distributed.run`` is the same launcher.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from workloads import distributed
from workloads.flags import FlagError, default_out, parse
from workloads.training import make_replica, publish, run_training


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse(argv, distributed.env_world_size())
    except FlagError as error:
        if distributed.env_rank() == 0:
            print(f"workloads.train: error: {error}", file=sys.stderr)
        return 2
    rank = distributed.init()
    try:
        out = Path(distributed.agree(str(config.out or default_out(datetime.now()))))
        out.mkdir(parents=True, exist_ok=True)
        replica = make_replica(config, rank.device)
        measured = run_training(config, rank, out, replica)
        publish(config, rank, out, replica, measured)
    finally:
        distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
