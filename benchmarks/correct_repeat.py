#!/usr/bin/env python3
"""Check the repo's correct ops that are not installed N times, each run in a fresh process, and
compare the verdicts: with check_repeat.py (the installed zoo), the false-alarm record.

    .venv/bin/python benchmarks/correct_repeat.py [N]

The ops: tests/correct_ops.py (written as tutorials write them, with no contract; and those correct
where they are not differentiable, each a false alarm once), the upstream-style Functions declared
in tests/test_declare.py, and the correct ops of the fixture plugins in plugins/ (opzoo-general-
fixtures: n-ary, multi-output and integer-parameter ops; opzoo-surrogate-fixtures: a surrogate-
gradient spike), registered by class in a private registry, every property, `ci` profile, CPU, with
`opzoo check`'s default workers. Each run after the first checks them in another order (rotated by
one op per run). Prints, per run, its wall time and whether every verdict is the first run's, and
whether any check failed; exits 1 if a verdict changed or a correct op failed. The result goes into
docs/records/testing.md ("No flakes").
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CORRECT = {  # name: (module, class), the module importable from tests/ or a plugin's folder
    "cube": ("correct_ops", "Cube"),
    "square": ("correct_ops", "Square"),
    "once": ("correct_ops", "OnceDifferentiable"),
    "seed_myrelu": ("correct_ops", "SeedMyReLU"),
    "matmul": ("opzoo_general.ops", "MatMul"),
    "rowsum": ("opzoo_general.ops", "RowSum"),
    "sincos": ("opzoo_general.ops", "SinCos"),
    "roll": ("opzoo_general.ops", "Roll"),
    "sigmoid_spike": ("opzoo_surrogate.ops", "SigmoidSpike"),
    # correct where they are not differentiable, each a false alarm once (tests/correct_ops.py AT_KINKS)
    "tie_split_max": ("correct_ops", "TieSplitMax"),
    "max_reduction": ("correct_ops", "MaxReduction"),
    "vector_norm": ("correct_ops", "VectorNorm"),
    "abs_diff": ("correct_ops", "AbsDiff"),
    "clamp_between": ("correct_ops", "ClampBetween"),
    "atan2": ("correct_ops", "Atan2"),
    "xlogy": ("correct_ops", "XLogY"),
    "pow": ("correct_ops", "Pow"),
    "variance": ("correct_ops", "Variance"),
    "triangle_spike": ("correct_ops", "TriangleSpike"),
    "float32_threshold": ("correct_ops", "Float32Threshold"),
    "rounds_by_path": ("correct_ops", "RoundsByPath"),
    "one_ulp_apart": ("correct_ops", "OneUlpApart"),
    # written as upstream packages write them, declared from outside (tests/test_declare.py)
    "cross_entropy": ("correct_ops", "DECLARED['cross_entropy']"),
    "sparsemax": ("test_declare", "SPARSEMAX"),
    "nll": ("test_declare", "NLL"),
    "sigmoid_spike_bf16": ("test_declare", "SIGMOID_SPIKE"),
    "piecewise_spike": ("test_declare", "PIECEWISE_SPIKE"),
    "sparsemax_bisect": ("test_declare", "SPARSEMAX_BISECT"),
    "masked_scale": ("test_declare", "MASKED"),
    "scaled_with_sign": ("test_declare", "WITH_SIGN"),
}
PATHS = [
    ROOT / "tests",
    ROOT / "plugins" / "opzoo-general-fixtures",
    ROOT / "plugins" / "opzoo-surrogate-fixtures",
]

RUN = """
import importlib, json, sys
sys.path[:0] = {paths!r}
import opzoo
from opzoo.testing.running._options import RunOptions
from opzoo.testing.running._parallel import check_all
reg = opzoo.Registry()
for name, (module, attr) in {ops!r}:
    base, _, key = attr.partition("[")  # "DECLARED['x']": an entry of a module's table
    obj = getattr(importlib.import_module(module), base)
    reg.register(obj[key[1:-2]] if key else obj, name=name)
specs = [reg.info(name) for name, _ in {ops!r}]
results = check_all(specs, RunOptions(profile="ci", device="cpu"), registry=reg)
print(json.dumps({{r.id: r.status for r in results}}))
"""


def verdicts(order: list[str]) -> tuple[dict[str, str], float]:
    ops = [(name, CORRECT[name]) for name in order]
    code = RUN.format(paths=[str(p) for p in PATHS], ops=ops)
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    took = time.perf_counter() - began
    if out.returncode != 0:
        sys.exit(f"the run failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), took


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    runs = int(argv[0]) if argv else 20
    names = list(CORRECT)
    first, took = verdicts(names)
    fails = sorted(k for k, v in first.items() if v == "fail")
    print(
        f"run 1: {took:.1f} s, {len(first)} checks, {len(fails)} failing: {', '.join(fails) or 'none'}",
        flush=True,
    )
    differ = 0
    for k in range(2, runs + 1):
        turn = (k - 1) % len(names)
        again, took = verdicts(names[turn:] + names[:turn])
        changed = sorted(i for i in set(first) | set(again) if first.get(i) != again.get(i))
        differ += bool(changed)
        print(
            f"run {k}: {took:.1f} s, " + (f"DIFFERS: {', '.join(changed)}" if changed else "same verdicts"),
            flush=True,
        )
    print(f"{runs} runs, {differ} with different verdicts, {len(fails)} failing checks")
    return 1 if differ or fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
