"""torchrun: this process's place in a multi-process job, read from the environment torchrun sets.

One helper for every job (the index build and training): without torchrun (WORLD_SIZE unset or 1)
a job is one process of rank 0 and nothing is initialised.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rank:
    """This process's rank in its job, the job's world size and the process's rank on its machine."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every process of the job (a no-op in a single process)."""
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


def join(backend: str, timeout: dt.timedelta | None = None) -> Rank:
    """(rank, world size, local rank) of this process; the process group is initialised with `backend`
    (gloo or nccl) when torchrun started several processes."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Rank()
    import torch.distributed as dist

    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
        dist.init_process_group(backend, **kwargs)
    return Rank(dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", "0")))
