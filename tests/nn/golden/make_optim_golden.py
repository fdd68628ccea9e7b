#!/usr/bin/python3
"""Writes optim_golden.h5: reference runs of torch.optim.SGD / AdamW and of the learning-rate
schedules, for tests/nn/{sgd,adamw,lr_scheduler}_test.cpp.

Run with the Debian python3 and torch 1.13 (float32, single-tensor implementation):
    /usr/bin/python3 tests/nn/golden/make_optim_golden.py

Layout (float32 tensors in torch's layout, float64 scalars and learning rates):
  /sgd/<config>, /adamw/<config>      attrs: the optimizer's hyper-parameters, steps
      params                          names of the parameters, in optimizer order
      lr                  (steps,)    learning rate of each step (set before the step)
      has_grad            (steps, P)  0 where the parameter's .grad was None at that step
      initial/<name>      shape       values before the first step
      grads/<name>        (steps, *shape)
      values/<name>       (steps, *shape)   values after each step
      state/<name>/<slot> shape       optimizer state after the last step; attr step
  /scheduler/<case>                   attrs: kind, base_lr, warmup_steps, total_steps
      lr                  (n + 1,)    lr after construction, then after each of n step()s
"""

import math
import os

import h5py
import numpy as np
import torch

STEPS = 10
SHAPES = {"0.weight": (5, 7), "0.bias": (5,), "2.weight": (3, 5)}
# (step, parameter) pairs whose gradient is None, so state is created lazily and step
# counts differ between parameters.
NO_GRAD = {(0, "0.bias"), (4, "0.bias"), (6, "2.weight")}


def make_problem(seed):
    """Returns initial values, per-step gradients and the has_grad mask (seeded)."""
    g = torch.Generator().manual_seed(seed)
    initial = {n: torch.randn(s, generator=g) for n, s in SHAPES.items()}
    grads = []
    for step in range(STEPS):
        # Scales from 1e-3 to 10 so the moments see very different magnitudes.
        scale = 10.0 ** (-3.0 + 4.0 * torch.rand((), generator=g).item())
        grads.append({n: torch.randn(s, generator=g) * scale for n, s in SHAPES.items()})
    return initial, grads


def run(out, make_optimizer, seed, use_no_grad, lr_fn=None):
    initial, grads = make_problem(seed)
    params = [torch.nn.Parameter(initial[n].clone()) for n in SHAPES]
    opt = make_optimizer(params)
    sched = lr_fn(opt) if lr_fn is not None else None
    names = list(SHAPES)
    values = {n: [] for n in names}
    lrs, mask = [], np.ones((STEPS, len(names)), dtype=np.uint8)
    for step in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        for j, (n, p) in enumerate(zip(names, params)):
            if use_no_grad and (step, n) in NO_GRAD:
                p.grad = None
                mask[step, j] = 0
            else:
                p.grad = grads[step][n].clone()
        opt.step()
        if sched is not None:
            sched.step()
        for n, p in zip(names, params):
            values[n].append(p.detach().clone())
    out.attrs["steps"] = STEPS
    out.create_dataset("params", data=np.array([n.encode() for n in names], dtype="S16"))
    out.create_dataset("lr", data=np.array(lrs, dtype=np.float64))
    out.create_dataset("has_grad", data=mask)
    for n in names:
        out.create_dataset(f"initial/{n}", data=initial[n].numpy())
        out.create_dataset(f"grads/{n}", data=torch.stack([g[n] for g in grads]).numpy())
        out.create_dataset(f"values/{n}", data=torch.stack(values[n]).numpy())
    for n, p in zip(names, params):
        state = opt.state[p]
        grp = out.create_group(f"state/{n}")
        steps_taken = sum(1 for s in range(STEPS) if not (use_no_grad and (s, n) in NO_GRAD))
        grp.attrs["step"] = steps_taken
        for slot, t in state.items():
            if slot == "step":
                assert int(t.item()) == steps_taken
            elif t is not None:
                grp.create_dataset(slot, data=t.numpy())


# transformers' schedules (optimization.py), written out so transformers is not needed.
def constant_lambda(warmup):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1.0, warmup))
        return 1.0
    return f


def linear_lambda(warmup, total):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    return f


def cosine_lambda(warmup, total, num_cycles=0.5):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        progress = float(step - warmup) / float(max(1, total - warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))
    return f


LAMBDAS = {"constant": lambda w, t: constant_lambda(w), "linear": linear_lambda,
           "cosine": cosine_lambda}


def main():
    torch.set_num_threads(1)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.h5")
    with h5py.File(path, "w") as f:
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["generator"] = "tests/nn/golden/make_optim_golden.py"

        sgd_configs = {
            "plain": dict(lr=0.1),
            "momentum": dict(lr=0.05, momentum=0.9),
            "dampening": dict(lr=0.05, momentum=0.9, dampening=0.1),
            "nesterov": dict(lr=0.05, momentum=0.9, nesterov=True),
            "weight_decay": dict(lr=0.1, weight_decay=1e-2),
            "all": dict(lr=0.03, momentum=0.8, weight_decay=1e-2, nesterov=True, maximize=True),
        }
        for i, (name, kw) in enumerate(sgd_configs.items()):
            full = dict(momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                        maximize=False)
            full.update(kw)
            grp = f.create_group(f"sgd/{name}")
            for k, v in full.items():
                grp.attrs[k] = float(v)
            run(grp, lambda ps: torch.optim.SGD(ps, foreach=False, **full), seed=100 + i,
                use_no_grad=name in ("momentum", "all"))

        adamw_configs = {
            "defaults": dict(),
            "weight_decay_0": dict(weight_decay=0.0),
            "betas_eps": dict(betas=(0.8, 0.99), eps=1e-6),
            "amsgrad_maximize": dict(lr=1e-2, amsgrad=True, maximize=True),
            "cosine_schedule": dict(lr=3e-3),
        }
        for i, (name, kw) in enumerate(adamw_configs.items()):
            full = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                        maximize=False)
            full.update(kw)
            grp = f.create_group(f"adamw/{name}")
            for k, v in full.items():
                if k == "betas":
                    grp.attrs["betas.0"], grp.attrs["betas.1"] = float(v[0]), float(v[1])
                else:
                    grp.attrs[k] = float(v)
            lr_fn = None
            if name == "cosine_schedule":
                grp.attrs["schedule_warmup_steps"] = 3
                lr_fn = lambda opt: torch.optim.lr_scheduler.LambdaLR(
                    opt, cosine_lambda(3, STEPS))
            run(grp, lambda ps: torch.optim.AdamW(ps, foreach=False, **full), seed=200 + i,
                use_no_grad=name in ("defaults", "amsgrad_maximize"), lr_fn=lr_fn)

        # (kind, warmup, total, steps taken); steps beyond total show what happens after.
        cases = [("constant", 0, 20, 25), ("constant", 3, 20, 25), ("linear", 3, 20, 25),
                 ("cosine", 3, 20, 25), ("linear", 0, 20, 22), ("cosine", 0, 20, 22),
                 ("linear", 5, 5, 8), ("cosine", 5, 5, 8), ("cosine", 7, 1000, 1000)]
        for kind, warmup, total, n in cases:
            base_lr = 3e-4
            opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, LAMBDAS[kind](warmup, total))
            lrs = [opt.param_groups[0]["lr"]]
            for _ in range(n):
                opt.step()
                sched.step()
                lrs.append(opt.param_groups[0]["lr"])
            grp = f.create_group(f"scheduler/{kind}_w{warmup}_t{total}")
            grp.attrs["kind"] = kind
            grp.attrs["base_lr"] = base_lr
            grp.attrs["warmup_steps"] = warmup
            grp.attrs["total_steps"] = total
            grp.create_dataset("lr", data=np.array(lrs, dtype=np.float64))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
