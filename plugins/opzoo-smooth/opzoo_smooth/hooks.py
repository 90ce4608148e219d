"""opzoo hook implementations. Kept light: ops are named by import path, imported on first use."""

from __future__ import annotations

import opzoo


@opzoo.hookimpl
def opzoo_ops():
    return {
        "xlogx": "opzoo_smooth.ops:XLogX",
        "isru": "opzoo_smooth.ops:ISRU",
    }


@opzoo.hookimpl
def opzoo_input_strategy(spec, dtype):
    # x log x lives on (0, inf) and changes fastest near 0: draw log-uniformly over many decades.
    if spec.name != "xlogx":
        return None
    from opzoo.testing import tensors

    return tensors(dtype=dtype, elements=("log-uniform", 1e-3, 1e3))
