"""Pluggy hook plugins for tests: good ones, raising ones, ones returning junk."""

import opzoo


class Good:
    @opzoo.hookimpl
    def opzoo_ops(self):
        return {"hooked": "fakeops:Double", "Scaled": "fakeops:Scale"}


class Raising:
    @opzoo.hookimpl
    def opzoo_ops(self):
        raise RuntimeError("boom")


class Junk:
    @opzoo.hookimpl
    def opzoo_ops(self):
        return ["not", "a", "mapping"]


class UnknownHook:
    @opzoo.hookimpl
    def opzoo_not_a_hook(self):
        return None


class Strategies:
    """Answers opzoo_input_strategy for 'double' only, counting the calls."""

    calls = 0

    @opzoo.hookimpl
    def opzoo_input_strategy(self, spec, dtype):
        Strategies.calls += 1
        if spec.name != "double":
            return None
        from opzoo.testing import tensors

        return tensors(dtype=dtype, shape=(3,), domain=(0.5, 1.0))


class RaisingStrategy:
    @opzoo.hookimpl
    def opzoo_input_strategy(self, spec, dtype):
        raise RuntimeError("strategy boom")


class JunkStrategy:
    @opzoo.hookimpl
    def opzoo_input_strategy(self, spec, dtype):
        return [1.0, 2.0]


good, raising, junk, unknown = Good(), Raising(), Junk(), UnknownHook()
strategies, raising_strategy, junk_strategy = Strategies(), RaisingStrategy(), JunkStrategy()
