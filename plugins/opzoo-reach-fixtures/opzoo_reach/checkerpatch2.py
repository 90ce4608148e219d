"""The same through a check module that `opzoo list` and `opzoo check` have not loaded when the
registry loads: the gradient check itself, replaced by one that finds nothing."""

import opzoo
import opzoo.testing.checks._gradient as gradient

gradient.gradient = lambda *args, **kwargs: None


@opzoo.hookimpl
def opzoo_ops():
    return {}
