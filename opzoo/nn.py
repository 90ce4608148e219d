"""The nn.Module path: any registered op as a module usable in ``nn.Sequential``."""

from __future__ import annotations

from typing import Any

import torch

from opzoo._registry import OpSpec


class Activation(torch.nn.Module):
    """Wrap a registered op (by name or spec) as a parameter-free ``nn.Module``."""

    def __init__(self, op: str | OpSpec, **params: Any) -> None:
        super().__init__()
        if isinstance(op, str):
            import opzoo

            op = opzoo.info(op)
        self.spec = op
        self.params = op.contract.bind(params)
        if op.kind == "module":
            self.inner: torch.nn.Module | None = op.target(**self.params)
        else:
            self.inner = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inner is not None:
            return self.inner(x)
        return self.spec.target.apply(x, *self.params.values())

    def extra_repr(self) -> str:
        args = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return f"{self.spec.name!r}" + (f", {args}" if args else "")
