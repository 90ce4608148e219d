"""Pluggy hook plugins for tests: one good, one raising, one returning junk."""

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


good, raising, junk, unknown = Good(), Raising(), Junk(), UnknownHook()
