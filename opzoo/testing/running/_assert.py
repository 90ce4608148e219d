"""opzoo's checks from a project's own test suite, with no plugin to publish: ``assert_correct``."""

from __future__ import annotations

from typing import Any, Iterable

from opzoo.core._contract import Contract
from opzoo.core._spec import spec_of
from opzoo.testing.properties import parse_properties
from opzoo.testing.running._result import Result, reports
from opzoo.testing.running._runner import DEVICES, check

__all__ = ["assert_correct", "spec_of"]


def assert_correct(
    target: Any,
    contract: Contract | None = None,
    *,
    properties: Iterable[str] | str | None = None,
    profile: str = "ci",
    name: str | None = None,
    devices: Iterable[str] = DEVICES,
    **kw: Any,
) -> list[Result]:
    """Check ``target`` as ``opzoo check`` would, in this process, and raise ``AssertionError`` with
    every failure's report (the counterexample and its reproduce lines) if any property fails.

    ``target``: a Function or learnable Module class, what :func:`opzoo.declare` returned, or an
    import path ``"package.module:Class"``; ``contract`` declares one for a class that has none.
    ``properties``: names, or a comma-separated string (all by default). CUDA checks are skipped
    where there is no GPU. Returns the results, passes and skips, when none failed; ``kw`` goes to
    :func:`~opzoo.testing.check_property` (``examples``, ``seed``, ``timeout``)."""
    spec = spec_of(target, contract, name=name)
    chosen = [properties] if isinstance(properties, str) else properties
    results = check(spec, parse_properties(chosen), devices=tuple(devices), profile=profile, **kw)
    failed = [r for r in results if r.status == "fail"]
    if failed:
        head = f"{len(failed)} of {len(results)} opzoo check(s) of {spec.name} failed"
        raise AssertionError("\n\n".join([head, *reports(failed)]))
    return results
