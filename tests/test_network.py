"""The seed's network built from registered ops: --linear and --loss, and what each part must be."""

from __future__ import annotations

import pytest
from conftest import run_opzoo
from seed_program import seed_losses

import opzoo
from opzoo.cli import main


def test_all_three_parts_from_registered_ops_reproduce_the_seed_float_for_float():
    """`--activation myrelu --linear linear --loss sse --seed 0` prints the seed program's five losses."""
    out = run_opzoo("train", "--seed", "0", "--activation", "myrelu", "--linear", "linear", "--loss", "sse")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{t} {loss}" for t, loss in seed_losses(0)]


def test_the_ops_really_run():
    """The registered linear and loss are the ones called (a different loss gives other losses)."""
    small = dict(batch=8, d_in=20, hidden=12, d_out=3, steps=5, lr=1e-3, seed=3)
    seed = opzoo.train(**small)
    ours = opzoo.train(**small, linear="linear", loss="sse")
    assert ours.losses == seed.losses
    assert ours.config.linear == "linear" and ours.config.loss == "sse"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--loss", "myrelu"], "the loss must be an op of signature (n,m),(n,m)->(); 'myrelu' has ()->()"),
        (["--linear", "sse"], "the linear must be an op of signature (n,k),(k,m)->(n,m); 'sse' has"),
        (["--activation", "linear"], "the activation must be an op of signature ()->() or (n)->(n)"),
        (["--linear", "torch:relu"], "the linear must be a registered op of signature"),
        (["--loss", "nope"], "no op named 'nope'"),
    ],
)
def test_an_op_of_the_wrong_shape_is_one_line_exit_2(argv, message, capsys):
    """Asking for an op of the wrong signature names the signature it needs, in one line."""
    assert main(["train", "--steps", "2", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opzoo: error: ") and err.count("\n") == 1, err
    assert message in err


def test_shape_preserving_ops_can_be_the_activation():
    """An (n)->(n) op (layer_norm, softmax) maps the hidden layer to its shape: it trains."""
    result = opzoo.train(
        activation="layer_norm", batch=8, d_in=20, hidden=12, d_out=3, steps=20, lr=1e-3, seed=1
    )
    assert result.final_loss < result.losses[0]
