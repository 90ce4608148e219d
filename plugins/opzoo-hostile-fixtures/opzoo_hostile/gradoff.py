"""Turns autograd off for the whole process at import: every other op's backward would vanish."""

import torch

from opzoo_hostile._relu import ReLU as Op  # noqa: F401  (the entry point names it)

torch.set_grad_enabled(False)
