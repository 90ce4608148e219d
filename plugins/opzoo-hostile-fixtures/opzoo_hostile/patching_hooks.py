"""A hook plugin (imported whenever the registry loads) that turns grad mode off at import: before,
`opzoo train` with any activation failed with a traceback."""

import torch

import opzoo

torch.set_grad_enabled(False)


@opzoo.hookimpl
def opzoo_ops():
    return {}
