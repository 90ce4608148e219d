"""A verbatim copy of the seed program's loop (000_1f2b50ab3c518129.txt), as the trainer's oracle."""

import torch


class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


def seed_losses(seed=0, steps=500):
    """Run the seed program after torch.manual_seed(seed); return its printed (t, loss) pairs."""
    torch.manual_seed(seed)
    dtype = torch.float
    device = torch.device("cpu")
    N, D_in, H, D_out = 64, 1000, 100, 10
    x = torch.randn(N, D_in, device=device, dtype=dtype)
    y = torch.randn(N, D_out, device=device, dtype=dtype)
    w1 = torch.randn(D_in, H, device=device, dtype=dtype, requires_grad=True)
    w2 = torch.randn(H, D_out, device=device, dtype=dtype, requires_grad=True)
    printed = []
    learning_rate = 1e-6
    for t in range(steps):
        relu = MyReLU.apply
        y_pred = relu(x.mm(w1)).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        if t % 100 == 99:
            printed.append((t, loss.item()))
        loss.backward()
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    return printed
