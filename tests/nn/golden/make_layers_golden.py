#!/usr/bin/python3
"""Writes the golden data of the nn/ parity tests (tests/nn/*_test.cpp), computed by PyTorch.

Run from anywhere with the Debian python (torch 1.13, h5py):
    /usr/bin/python3 tests/nn/golden/make_layers_golden.py
It rewrites, next to this script:
  layers.h5   one group per case: inputs, parameters, a given upstream gradient ("grad_y"),
              and torch's outputs and gradients (float32; labels int32), see each function.
  mlp_sgd.h5  a 20-32-32-5 ReLU MLP trained 20 steps with plain SGD (lr 0.1): initial
              weights, batches, per-step losses, first-step gradients, final weights.
All tensors use torch's layout (Linear weight is (out, in)), row-major. Values are fixed by
torch.manual_seed, so rerunning reproduces the files (up to h5py metadata).
"""

import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy()


def put(group, **arrays):
    for name, value in arrays.items():
        if isinstance(value, torch.Tensor):
            value = f32(value)
        group.create_dataset(name, data=value)


def layer_case(f, name, module, x, params=()):
    """Forward x (requires grad), backward a random upstream gradient; store everything."""
    x = x.clone().requires_grad_(True)
    y = module(x)
    grad_y = torch.randn_like(y)
    y.backward(grad_y)
    g = f.create_group(name)
    put(g, x=x, y=y, grad_y=grad_y, grad_x=x.grad)
    for pname in params:
        p = getattr(module, pname)
        put(g, **{pname: p, "grad_" + pname: p.grad})


def orthogonal_case(f, name, shape, gain):
    """torch.nn.init.orthogonal_'s algorithm on a stored Gaussian sample."""
    sample = torch.randn(shape)
    rows, cols = shape
    flat = sample.clone()
    if rows < cols:
        flat = flat.t()
    q, r = torch.linalg.qr(flat)
    q = q * torch.diag(r, 0).sign()
    if rows < cols:
        q = q.t()
    put(f.create_group(name), sample=sample, q=q * gain, gain=np.float32(gain))


def emulate_linear(x, w, b, grad_y, dtype):
    """Our mixed-precision semantics (DESIGN.md section 3) computed in float64: inputs rounded
    to `dtype`, products accumulated exactly, every stored result rounded to `dtype`."""
    r = lambda t: t.to(dtype).to(torch.float64)
    xr, wr, br, gr = r(x), r(w), r(b), r(grad_y)
    y = r(xr @ wr.t() + br)
    grad_x = r(gr @ wr)
    grad_w = r(gr.t() @ xr)
    grad_b = r(gr.sum(0))
    return y, grad_x, grad_w, grad_b


def precision_case(f, name, dtype, x, w, b, grad_y, with_torch):
    g = f.create_group(name)
    put(g, x=x, weight=w, bias=b, grad_y=grad_y)
    y, gx, gw, gb = emulate_linear(x, w, b, grad_y, dtype)
    put(g, emu_y=y, emu_grad_x=gx, emu_grad_weight=gw, emu_grad_bias=gb)
    if with_torch:
        # torch's own CPU kernels on 16-bit tensors (bf16 only: torch 1.13 has no CPU fp16
        # matmul).
        xt = x.to(dtype).requires_grad_(True)
        wt = w.to(dtype).requires_grad_(True)
        bt = b.to(dtype).requires_grad_(True)
        yt = F.linear(xt, wt, bt)
        yt.backward(grad_y.to(dtype))
        put(g, torch_y=yt, torch_grad_x=xt.grad, torch_grad_weight=wt.grad,
            torch_grad_bias=bt.grad)


def make_layers(path):
    torch.manual_seed(1234)
    with h5py.File(path, "w") as f:
        lin = torch.nn.Linear(20, 12)
        layer_case(f, "linear", lin, torch.randn(6, 20), ("weight", "bias"))
        lin3 = torch.nn.Linear(7, 5)
        layer_case(f, "linear3d", lin3, torch.randn(2, 3, 7), ("weight", "bias"))
        layer_case(f, "relu", torch.nn.ReLU(), torch.randn(6, 16) * 2)
        layer_case(f, "gelu", torch.nn.GELU(), torch.randn(6, 16) * 2)
        layer_case(f, "tanh", torch.nn.Tanh(), torch.randn(6, 16) * 2)
        ln = torch.nn.LayerNorm(16)
        with torch.no_grad():
            ln.weight.copy_(torch.randn(16))
            ln.bias.copy_(torch.randn(16))
        layer_case(f, "layer_norm", ln, torch.randn(2, 3, 16) * 3 + 1, ("weight", "bias"))
        drop = torch.nn.Dropout(0.3)
        drop.eval()
        layer_case(f, "dropout_eval", drop, torch.randn(6, 16))

        # Cross-entropy: one row with huge logits checks the log-sum-exp shift.
        logits = torch.randn(8, 5) * 3
        logits[3] += 1000.0
        labels = torch.randint(0, 5, (8,), dtype=torch.int64)
        lg = logits.clone().requires_grad_(True)
        loss = F.cross_entropy(lg, labels)
        loss.backward()
        put(f.create_group("cross_entropy"), logits=logits,
            labels=labels.to(torch.int32).numpy(), loss=np.float32(loss.item()),
            grad_logits=lg.grad)

        pred = torch.randn(6, 4).requires_grad_(True)
        target = torch.randn(6, 4)
        loss = F.mse_loss(pred, target)
        loss.backward()
        put(f.create_group("mse"), prediction=pred, target=target,
            loss=np.float32(loss.item()), grad_prediction=pred.grad)

        orthogonal_case(f, "orthogonal_tall", (8, 5), 1.5)
        orthogonal_case(f, "orthogonal_wide", (3, 7), 1.0)

        # Mixed precision Linear: 64 x 48 -> 24 keeps files small but sums long enough to
        # exercise fp32 accumulation.
        x = torch.randn(64, 48)
        w = torch.randn(24, 48) * 0.2
        b = torch.randn(24) * 0.1
        grad_y = torch.randn(64, 24)
        precision_case(f, "linear_bf16", torch.bfloat16, x, w, b, grad_y, True)
        precision_case(f, "linear_fp16", torch.float16, x, w, b, grad_y, False)
        # fp16 overflow: outputs of a few 1e4 with tails beyond the fp16 range (65504) become inf.
        precision_case(f, "linear_fp16_overflow", torch.float16, x * 300.0, w * 100.0, b,
                       grad_y, False)


def make_mlp_sgd(path, steps=20, batch=16, lr=0.1):
    torch.manual_seed(4321)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 5))
    xs = torch.randn(steps, batch, 20)
    ys = torch.randint(0, 5, (steps, batch), dtype=torch.int64)
    with h5py.File(path, "w") as f:
        put(f.create_group("init"), **{k: v for k, v in model.state_dict().items()})
        put(f, x=xs, labels=ys.to(torch.int32).numpy(), lr=np.float32(lr))
        losses = []
        for step in range(steps):
            for p in model.parameters():
                p.grad = None
            loss = F.cross_entropy(model(xs[step]), ys[step])
            loss.backward()
            losses.append(loss.item())
            if step == 0:
                put(f.create_group("step0_grad"),
                    **{k: p.grad for k, p in model.named_parameters()})
            with torch.no_grad():
                for p in model.parameters():
                    p -= lr * p.grad
        put(f, losses=np.asarray(losses, dtype=np.float32))
        put(f.create_group("final"), **{k: v for k, v in model.state_dict().items()})


if __name__ == "__main__":
    torch.set_num_threads(1)
    make_layers(os.path.join(HERE, "layers.h5"))
    make_mlp_sgd(os.path.join(HERE, "mlp_sgd.h5"))
