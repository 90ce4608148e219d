"""Patches torch.Tensor.__mul__ at import (a 'fix' for its own op): every other op's * changes."""

import torch

from opzoo_hostile._relu import ReLU as Op  # noqa: F401  (the entry point names it)

torch.Tensor.__mul__ = lambda self, other: torch.mul(self, other) * 0  # noqa: E731
