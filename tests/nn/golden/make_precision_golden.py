#!/usr/bin/python3
"""Writes precision_layers.h5, the golden data of tests/nn/precision_layers_test.cpp: the
activation layers and a whole MLP in bf16 and fp16, as mpitrain emulates them on CPU
(DESIGN.md section 3), with the 16-bit rounding done by torch.

Run from anywhere with the Debian python (torch 1.13, h5py):
    /usr/bin/python3 tests/nn/golden/make_precision_golden.py

What a GPU does in bf16/fp16, and what the references below compute: every stored tensor is
16-bit, each kernel reads 16-bit values, computes in float32 (torch's "opmath") and rounds its
result once. So each reference is torch's float32 kernel applied to inputs that torch rounded
to the format (`t.to(dtype)`), its result rounded by torch again. Groups, for dt in bf16, fp16:

  act_<name>_<dt>   name in relu, gelu, tanh: x and grad_y (on the dt grid), y = round(f(x)),
                    grad_x = round(f'(.) * grad_y) from torch's own float32 backward kernels
                    (threshold_backward on y, gelu_backward on x, tanh_backward on y).
  act_<name>_bf16/native_y, native_grad_x: torch's own bf16 CPU kernels, for comparison; relu
                    and gelu agree with the references bit for bit, tanh's backward does not
                    (torch 1.13's CPU bf16 vector ops round after every operation, which no
                    GPU kernel does). torch 1.13 has no CPU fp16 kernels for these ops.
  mlp_gelu_<dt>     Sequential(Linear(20, 32), GELU, Linear(32, 32), GELU, Linear(32, 5)):
                    parameters ("0.weight", ...), x, grad_y (float32, rounded by the model),
                    y, grad_x and the parameter gradients "grad_0.weight", ... computed in
                    float64 from rounded operands, every stored result rounded with torch.
Fixed seeds: rerunning reproduces the file (up to h5py metadata).
"""

import math
import os

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy()


def put(group, **arrays):
    for name, value in arrays.items():
        group.create_dataset(name, data=f32(value))


def rounded(t, dt):
    """t rounded to dt by torch, back in t's dtype."""
    return t.to(dt).to(t.dtype)


def activation_cases(f, dt_name, dt):
    # Inputs span both signs, the saturating tails of tanh and gelu, and values that are not
    # on the grid before rounding.
    x = rounded(torch.randn(8, 64) * 3.0, dt)
    grad_y = rounded(torch.randn(8, 64), dt)
    refs = {
        "relu": (lambda x: F.relu(x),
                 lambda g, x, y: torch.ops.aten.threshold_backward(g, y, 0.0)),
        "gelu": (lambda x: F.gelu(x),
                 lambda g, x, y: torch.ops.aten.gelu_backward(g, x)),
        "tanh": (lambda x: torch.tanh(x),
                 lambda g, x, y: torch.ops.aten.tanh_backward(g, y)),
    }
    for name, (fwd, bwd) in refs.items():
        y = rounded(fwd(x), dt)
        grad_x = rounded(bwd(grad_y, x, y), dt)
        g = f.create_group(f"act_{name}_{dt_name}")
        put(g, x=x, grad_y=grad_y, y=y, grad_x=grad_x)
        if dt_name == "bf16":
            xn = x.to(dt).requires_grad_(True)
            yn = fwd(xn)
            yn.backward(grad_y.to(dt))
            put(g, native_y=yn, native_grad_x=xn.grad)


def emulate_mlp(params, x, grad_y, dt):
    """Forward and backward of Linear-GELU-Linear-GELU-Linear in float64, every stored
    value rounded to dt (mpitrain's nn layers, DESIGN.md section 3)."""
    r = lambda t: t.to(dt).to(torch.float64)
    d = lambda t: t.to(torch.float64)
    phi = lambda v: 0.5 * (1.0 + torch.erf(v / math.sqrt(2.0)))
    pdf = lambda v: torch.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)

    saved = []
    h = d(x)
    for k, name in enumerate(("0", "2", "4")):
        w, b = r(d(params[name + ".weight"])), r(d(params[name + ".bias"]))
        xin = r(h)
        h = r(xin @ w.t() + b)
        saved.append((name, xin, w))
        if k < 2:
            a = h  # the GELU input, already on the grid
            h = r(a * phi(a))
            saved.append(("gelu", a, None))
    y = h

    grads = {}
    g = d(grad_y)
    for name, xin, w in reversed(saved):
        if name == "gelu":
            g = r(g * (phi(xin) + xin * pdf(xin)))
            continue
        g = r(g)
        grads["grad_" + name + ".bias"] = r(g.sum(0))
        grads["grad_" + name + ".weight"] = r(g.t() @ xin)
        g = r(g @ w)
    return y, g, grads


def mlp_cases(f):
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 5))
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    x = torch.randn(16, 20)
    grad_y = torch.randn(16, 5) * 0.1
    for dt_name, dt in DTYPES.items():
        y, grad_x, grads = emulate_mlp(params, x, grad_y, dt)
        g = f.create_group(f"mlp_gelu_{dt_name}")
        put(g, x=x, grad_y=grad_y, y=y, grad_x=grad_x, **params, **grads)


def main():
    torch.manual_seed(2024)
    with h5py.File(os.path.join(HERE, "precision_layers.h5"), "w") as f:
        for dt_name, dt in DTYPES.items():
            activation_cases(f, dt_name, dt)
        mlp_cases(f)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
