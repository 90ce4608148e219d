"""Replaces torch.relu and sets float64 as the default dtype at import."""

import torch

from opzoo_hostile._relu import ReLU as Op  # noqa: F401  (the entry point names it)

torch.relu = lambda x: x  # noqa: E731
torch.set_default_dtype(torch.float64)
