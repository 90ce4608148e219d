"""A classic ``forward(ctx, ...)`` run again for its context, as the bridge's kernel ran it.

torch.library hands a context only to ``setup_context``, so the bridge (:mod:`opzoo._custom_op`)
runs a classic forward twice in an eager call that needs a gradient: once as the kernel, once again
with a recording context to learn what it saves. Eager, the second run is bookkeeping, and must be
the first one's twin:

- unseen by dispatch modes that only watch (opcheck's SchemaCheckMode, a user's FLOP counter), as
  the kernel's run is: seen op by op, a no-op ``x.to(x.dtype)``, ``type_as`` or the
  ``resolve_conj`` of ``.tolist()`` returns its input, which below autograd SchemaCheckMode calls an
  aliasing schema violation, though the Function is right (its setup_context form passes);
- drawing the random numbers the kernel drew (a dropout's mask), from the random state the kernel
  started from, kept for it per op and per thread: else backward gets another draw's mask.

Under tracing (fake tensors, functionalization, proxies) the kernel does not run and the modes
stay: what the rerun saves must be traced. The mode stack is private to torch; where it moved, the
rerun is watched as before. Traced, a random draw in the rerun is not the kernel's: an op seen to
draw (eager, before) is refused there rather than given another draw's gradient.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence

import torch

from opzoo.core import _recording
from opzoo.exceptions import LibraryError

__all__ = ["again", "remember"]

# torch name -> the random state its kernel last started from, in this thread.
_STARTS = threading.local()
# The torch names of the ops whose classic forward was seen to draw random numbers.
_RANDOM: set[str] = set()


def remember(tname: str, tensors: Sequence[Any]) -> None:
    """Keep the random state the kernel of op ``tname`` starts from: the CPU generator's, and each
    CUDA device's that ``tensors`` are on."""
    devices = sorted({t.get_device() for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda})
    cuda = {d: torch.cuda.get_rng_state(d) for d in devices}
    _starts()[tname] = (torch.get_rng_state(), cuda)


def again(
    tname: str, forward: Callable[..., Any], args: Sequence[Any], needs_input_grad: Sequence[bool]
) -> tuple[Any, _recording.Record]:
    """Run classic ``forward`` on ``args`` again with a recording context (its outputs and record,
    as :func:`opzoo.core._recording.run`), unseen and drawing what the kernel of ``tname`` drew."""
    start = _starts().pop(tname, None)
    quiet = _unwatched()
    if quiet is None:  # tracing: the kernel did not run here, and the modes must see the rerun
        if tname in _RANDOM:
            raise LibraryError(
                f"torch.ops.opzoo.{tname}: its classic forward draws random numbers, and traced, the "
                "rerun that fills its context would draw others than its kernel (backward would use "
                "another draw's); it is not traced with a gradient: write the Function in the "
                "setup_context form, or call it outside the compiled code"
            )
        return _recording.run(forward, args, needs_input_grad)
    with quiet:  # the modes see none of it: neither the rerun nor the reading of the generators
        drew = start is not None and _moved(start)
        if drew:
            _RANDOM.add(tname)
        with _drawing_from(start if drew else None):  # no draw by the kernel, none by the rerun
            return _recording.run(forward, args, needs_input_grad)


def _starts() -> dict[str, Any]:
    if not hasattr(_STARTS, "by_op"):
        _STARTS.by_op = {}
    return _STARTS.by_op


def _moved(start: Any) -> bool:
    """Whether a generator moved since ``start`` (the kernel drew random numbers)."""
    cpu, cuda = start
    now = [torch.get_rng_state(), *(torch.cuda.get_rng_state(d) for d in cuda)]
    # compared as bytes: a tenth of torch.equal's time on a 5 kB state
    return any(a.numpy().tobytes() != b.numpy().tobytes() for a, b in zip([cpu, *cuda.values()], now))


def _unwatched() -> Any:
    """A context with the current dispatch modes off; None under a mode that traces."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch._subclasses.functional_tensor import FunctionalTensorMode
        from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode
        from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode_stack
    except ImportError:  # pragma: no cover - a torch that moved them
        return contextlib.nullcontext()
    stack = _get_current_dispatch_mode_stack()
    if any(isinstance(m, (FakeTensorMode, FunctionalTensorMode, ProxyTorchDispatchMode)) for m in stack):
        return None
    return _disable_current_modes() if stack else contextlib.nullcontext()


@contextlib.contextmanager
def _drawing_from(start: Any) -> Iterator[None]:
    """Random draws from ``start`` (a state :func:`remember` kept) inside; the generators as they
    were (after the kernel's draws) outside."""
    if start is None:
        yield
        return
    cpu, cuda = start
    with torch.random.fork_rng(devices=list(cuda)):
        torch.set_rng_state(cpu)
        for device, state in cuda.items():
            torch.cuda.set_rng_state(state, device)
        yield
