"""Data-parallel training under torchrun: one process per rank, DistributedDataParallel between them.

Every rank draws the same data and initial weights from the seed, then takes its shard of each global
batch (``torch.tensor_split``: shards differ by at most one row, and the global batch does not depend
on the number of ranks). DDP sums the shards' gradients, which is the gradient of the global batch's
sum-of-squares loss, so every rank takes the update one process takes on the whole batch.

Errors before the first step are agreed on (:func:`agree`): a rank that fails makes every rank raise,
and rank 0 reports it, so no rank is left waiting in a collective. Only rank 0 prints and writes.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, TypeVar

import torch
import torch.distributed as dist

from opzoo.exceptions import ConfigError, OpZooError

T = TypeVar("T")
#: What torchrun sets for each process it starts (the rendezvous reads MASTER_ADDR and MASTER_PORT).
ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: Seconds a collective waits for the other ranks before the job fails (--collective-timeout): not
#: gloo's 30 minutes, during which a stopped rank held every other one.
COLLECTIVE_TIMEOUT = 300.0


@dataclass(frozen=True)
class World:
    """This process's place among the ranks of a torchrun job."""

    rank: int
    size: int
    local_rank: int

    @property
    def main(self) -> bool:
        """Rank 0: the one that prints, writes outputs and checkpoints."""
        return self.rank == 0


class RankError(OpZooError):
    """Another rank's error, raised on this one so that every rank stops (rank 0 reports it)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def from_env(environ: Mapping[str, str] = os.environ) -> World | None:
    """The world torchrun describes in ``environ``; None for one process (WORLD_SIZE unset or 1)."""
    size = environ.get("WORLD_SIZE", "").strip()
    if size in ("", "1"):
        return None
    missing = [name for name in ENV if not environ.get(name, "").strip()]
    if missing:
        raise ConfigError(
            f"WORLD_SIZE={size} asks for several processes, but {missing[0]} is not set; "
            "start them with torchrun (docs/trainer.md)"
        )
    try:
        world = World(int(environ["RANK"]), int(size), int(environ["LOCAL_RANK"]))
    except ValueError:
        raise ConfigError(
            "WORLD_SIZE, RANK and LOCAL_RANK must be integers, got "
            f"{size!r}, {environ['RANK']!r}, {environ['LOCAL_RANK']!r}"
        ) from None
    if not (world.size > 1 and 0 <= world.rank < world.size and world.local_rank >= 0):
        raise ConfigError(f"RANK={world.rank} does not fit WORLD_SIZE={world.size}")
    return world


def rank_device(world: World, requested: str | None) -> str:
    """This rank's device: ``cuda:LOCAL_RANK`` for cuda (the default when available), else the CPU."""
    if requested is None:
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = requested.partition(":")
    if kind != "cuda":
        return requested
    if index:
        raise ConfigError(
            f"under torchrun each rank takes the GPU cuda:LOCAL_RANK; give device 'cuda', not {requested!r}"
        )
    return f"cuda:{world.local_rank}"


@contextlib.contextmanager
def process_group(world: World, device: str, timeout: float = COLLECTIVE_TIMEOUT) -> Iterator[None]:
    """Join the job's process group (gloo on the CPU, nccl on CUDA) and leave it afterwards, also on
    an error: a rank that leaves without it makes torch warn of a leaked group. A collective that
    waits more than ``timeout`` seconds for a rank fails (see :func:`collective_timeout`)."""
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        rank=world.rank,
        world_size=world.size,
        timeout=datetime.timedelta(seconds=timeout),
        **({"device_id": torch.device(device)} if cuda else {}),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


class CollectiveTimeout(OpZooError):
    """A collective waited longer than ``collective_timeout`` for another rank (stopped, hung or
    dead): this rank fails the job, rather than wait on."""

    exit_code = 1  # not a usage mistake: the job itself failed


def timed_out(exc: BaseException, world: World, timeout: float) -> CollectiveTimeout | None:
    """``exc`` as a CollectiveTimeout if it is a collective's timeout (gloo's "Timed out waiting
    ...ms for recv operation", raised through DDP's hook or an all-reduce), else None."""
    text = str(exc)
    if "Timed out" not in text and "timed out" not in text.lower():
        return None
    return CollectiveTimeout(
        f"rank {world.rank}: a collective waited {timeout:g} s for the other ranks and gave up: one of "
        "them stopped, hung or died (`collective_timeout` sets the wait)"
    )


def agree(world: World, work: Callable[[], T]) -> T:
    """Run ``work`` on every rank; if it fails on any, raise on all.

    Each rank that failed raises its own error; the others raise :class:`RankError` with the first
    failed rank's message and exit code. Rank 0, which comes first, so reports the first failure.
    Without this, ranks that passed would wait in their next collective for the one that left (until
    torchrun noticed), and a failure on rank 1 alone would go unreported.
    """
    error: BaseException | None = None
    try:
        result = work()
    except Exception as exc:  # reported to the others first, then raised here as it is
        error = exc
    mine = None
    if error is not None:
        code = getattr(error, "exit_code", 2) if isinstance(error, OpZooError) else 1
        mine = (str(error) or type(error).__name__, code)
    told: list[Any] = [None] * world.size
    dist.all_gather_object(told, mine)
    first = next(((rank, failed) for rank, failed in enumerate(told) if failed is not None), None)
    if first is None:
        return result
    if error is None:
        rank, (message, code) = first
        error = RankError(f"rank {rank}: {message}", code)
    if isinstance(error, OpZooError):
        error.reported_by_rank_0 = True  # type: ignore[attr-defined]  # (see cli._common.quiet_rank)
    raise error


class _SeedNet(torch.nn.Module):
    """The seed's network as one module, for DDP to find its parameters: ``w1``, ``w2`` and the
    activation's (``act.*``, the names the trainer gives them)."""

    def __init__(self, net: Any, w1: torch.nn.Parameter, w2: torch.nn.Parameter) -> None:
        super().__init__()
        self.w1, self.w2, self.act = w1, w2, net.act
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(x, y, self.w1, self.w2)


def _sum_gradients(state, bucket):  # type: ignore[no-untyped-def]
    # (No annotations: DDP compares the hook's with dist.GradBucket, which a string annotation, as
    # `from __future__ import annotations` makes them, is not.)
    # DDP divides the all-reduced gradients by the number of ranks: it assumes each rank's loss is a
    # mean over its rows. The seed's loss is a sum over rows, so the global batch's gradient is the
    # plain sum of the shards' gradients. This hook all-reduces with SUM and divides by nothing, which
    # is that sum exactly; scaling each rank's loss by P instead would add a multiplication (exact for
    # P a power of two only) and change the loss that autograd sees.
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.SUM, async_op=True)
    assert work is not None
    return work.get_future().then(lambda fut: fut.value()[0])


def data_parallel(net: Any, w1: torch.nn.Parameter, w2: torch.nn.Parameter, device: str) -> Any:
    """The network wrapped in DistributedDataParallel, its gradients summed over the ranks."""
    from torch.nn.parallel import DistributedDataParallel

    index = torch.device(device).index
    model = DistributedDataParallel(
        _SeedNet(net, w1, w2), device_ids=[index] if device.startswith("cuda") else None
    )
    model.register_comm_hook(None, _sum_gradients)
    return model


def shard(world: World, t: torch.Tensor) -> torch.Tensor:
    """This rank's rows of ``t``: the rank-th of ``world.size`` nearly equal consecutive parts."""
    return torch.tensor_split(t, world.size)[world.rank]


def global_loss(loss: torch.Tensor) -> float:
    """The global batch's loss: the sum of the ranks' losses, added in float64 and rounded once to the
    loss's dtype (what one process prints, up to the order of the additions)."""
    total = loss.detach().to(torch.float64).reshape(1)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.to(loss.dtype).item()


def check_batch(world: World, rows: int) -> None:
    """Refuse a global batch with fewer rows than ranks: a rank would get none."""
    if rows < world.size:
        raise ConfigError(
            f"the global batch has {rows} row(s), fewer than the {world.size} processes: each needs "
            "at least one; give a larger `batch` or fewer processes"
        )


def check_additive(
    world: World, net: Any, x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor
) -> None:
    """Refuse a loss that is not a sum over rows (a mean, say): the ranks' losses would not add up to
    the global batch's, nor their gradients to its gradient. Checked on the first global batch, the
    same on every rank."""
    with torch.no_grad():
        whole = net(x, y, w1, w2).double().item()
        parts = sum(
            net(xs, ys, w1, w2).double().item()
            for xs, ys in zip(torch.tensor_split(x, world.size), torch.tensor_split(y, world.size))
        )
    if not abs(whole - parts) <= 1e-3 * max(abs(whole), abs(parts)):
        raise ConfigError(
            f"under torchrun the loss must be a sum over rows: on the first batch it is {whole:.6g}, "
            f"but its {world.size} shards' losses add up to {parts:.6g} (a mean?)"
        )
