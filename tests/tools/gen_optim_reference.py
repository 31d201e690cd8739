#!/usr/bin/python3
"""Writes tests/data/optim_reference.json: parameter values after each of 5
PyTorch optimizer steps, for fixed initial values and fixed gradients.

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 tests/tools/gen_optim_reference.py

Layout (arrays are {"shape": [...], "data": [...]}, row-major):
  dense.<case>:  {"optimizer", "options",
                  "params":   [weight [3, 4], bias [4]],
                  "grads":    5 steps x [weight grad, bias grad or null (no gradient)],
                  "expected": 5 steps x [weight, bias] after that step}
  sparse.<case>: {"optimizer", "options",
                  "param":    [8, 3],
                  "grads":    5 steps x {"rows": sorted unique, "values": [len(rows), 3]},
                  "expected": 5 steps x param after that step}
  groups.<case>: a dense case whose optimizer has two param groups:
                  "groups": [{"params": [0], "lr": ...}, {"params": [1], ...}] (what each
                  group sets; the rest comes from "options")
  schedules.<case>: {"groups_lr": initial lr of each of 2 groups, "schedulers": [[name, kwargs], ...]
                  (all attached to one SGD, stepped in that order), "steps",
                  "set_lr": [after step k, group, factor] or null (a manual change of the lr),
                  "lrs": (steps + 1) x [lr per group]: get_last_lr() of the last scheduler
                  after construction, then after each step, as Python floats}
  scheduled.<case>: a dense case with "groups", whose "scheduler" [name, kwargs] steps
                  after every optimizer step
  state.<case>:  {"optimizer", "options", "groups" or null, "params" or "param",
                  "grads" (5 steps, dense or sparse as above), "save_after": 3,
                  "state": per parameter {"step": n or null, "<name>": array} after
                  step 3, from PyTorch's state_dict(),
                  "expected": params after step 5 of an optimizer that was given
                  load_state_dict(state_dict()) after step 3, on fresh parameters}
"""
import copy

import torch

from reference import f32_values, write_indented

STEPS = 5
SCALES = [1.0, 3.0, 0.5, 0.2, 1.0]  # gradient size per step; shrinking v exercises amsgrad


def array(t):
    return {"shape": list(t.shape), "data": f32_values(t)}


def dense_case(gen, optimizer, options, missing_bias_grad_at=None):
    weight = torch.randn(3, 4, generator=gen).requires_grad_()
    bias = torch.randn(4, generator=gen).requires_grad_()
    case = {"optimizer": optimizer, "options": options,
            "params": [array(weight), array(bias)], "grads": [], "expected": []}
    kwargs = dict(options)
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    opt = getattr(torch.optim, optimizer)([weight, bias], **kwargs)
    for step in range(STEPS):
        gw = torch.randn(3, 4, generator=gen) * SCALES[step]
        gb = torch.randn(4, generator=gen) * SCALES[step]
        weight.grad = gw.clone()
        bias.grad = None if step == missing_bias_grad_at else gb.clone()
        opt.step()
        case["grads"].append([array(gw), None if bias.grad is None else array(gb)])
        case["expected"].append([array(weight.detach()), array(bias.detach())])
    return case


# Rows listed per step for an [8, 3] parameter: 3 repeats across steps, 1, 5, 6
# come back after a gap, and 2, 4, 7 are never listed.
SPARSE_ROWS = [[1, 3], [3, 5, 6], [0, 1], [3], [1, 5, 6]]


def sparse_case(gen, optimizer, options):
    param = torch.randn(8, 3, generator=gen).requires_grad_()
    case = {"optimizer": optimizer, "options": options,
            "param": array(param), "grads": [], "expected": []}
    opt = getattr(torch.optim, optimizer)([param], **options)
    for step, rows in enumerate(SPARSE_ROWS):
        values = torch.randn(len(rows), 3, generator=gen) * SCALES[step]
        param.grad = torch.sparse_coo_tensor([rows], values, (8, 3)).coalesce()
        opt.step()
        case["grads"].append({"rows": rows, "values": array(values)})
        case["expected"].append(array(param.detach()))
    return case


def dense_params(gen):
    weight = torch.randn(3, 4, generator=gen).requires_grad_()
    bias = torch.randn(4, generator=gen).requires_grad_()
    return [weight, bias]


def make_optimizer(optimizer, params, options, groups):
    kwargs = dict(options)
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    if groups is not None:
        params = [dict(g, params=[params[i] for i in g["params"]]) for g in groups]
    return getattr(torch.optim, optimizer)(params, **kwargs)


def make_scheduler(opt, spec):
    name, kwargs = spec
    return getattr(torch.optim.lr_scheduler, name)(opt, **kwargs)


def group_case(gen, optimizer, options, groups, scheduler=None, steps=STEPS):
    params = dense_params(gen)
    case = {"optimizer": optimizer, "options": options, "groups": groups, "scheduler": scheduler,
            "params": [array(p) for p in params], "grads": [], "expected": [], "lrs": []}
    opt = make_optimizer(optimizer, params, options, groups)
    sched = make_scheduler(opt, scheduler) if scheduler else None
    for step in range(steps):
        grads = [torch.randn(p.shape, generator=gen) * SCALES[step % len(SCALES)] for p in params]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        if sched:
            sched.step()
        case["grads"].append([array(g) for g in grads])
        case["expected"].append([array(p.detach()) for p in params])
        case["lrs"].append([g["lr"] for g in opt.param_groups])
    return case


def schedule_case(schedulers, steps=60, groups_lr=(0.1, 0.03), set_lr=None):
    params = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, groups_lr)], lr=1.0)
    scheds = [make_scheduler(opt, s) for s in schedulers]
    lrs = [list(scheds[-1].get_last_lr())]
    for step in range(1, steps + 1):
        opt.step()  # no gradients: a no-op, but schedulers expect a step first
        for s in scheds:
            s.step()
        lrs.append(list(scheds[-1].get_last_lr()))
        assert lrs[-1] == [g["lr"] for g in opt.param_groups]
        if set_lr and set_lr[0] == step:
            opt.param_groups[set_lr[1]]["lr"] = opt.param_groups[set_lr[1]]["lr"] * set_lr[2]
    return {"groups_lr": list(groups_lr), "schedulers": schedulers, "steps": steps, "set_lr": set_lr,
            "lrs": lrs}


def state_of(opt, params):
    out = []
    for p in params:
        st = opt.state.get(p, {})
        step = st.get("step")  # a float tensor in Adam, an int in SparseAdam
        entry = {"step": None if step is None else int(step.item() if torch.is_tensor(step) else step)}
        for name, value in st.items():
            if name != "step" and torch.is_tensor(value):
                entry[name] = array(value.to_dense() if value.is_sparse else value)
        out.append(entry)
    return out


def state_case(gen, optimizer, options, groups=None, sparse=False, save_after=3):
    """Steps 1-3 on one optimizer; its state_dict() loaded into a new optimizer
    over fresh copies of the parameters, which takes steps 4-5."""
    if sparse:
        params = [torch.randn(8, 3, generator=gen).requires_grad_()]
        grads = []
        for step, rows in enumerate(SPARSE_ROWS):
            values = torch.randn(len(rows), 3, generator=gen) * SCALES[step]
            grads.append([(rows, values)])
    else:
        params = dense_params(gen)
        grads = [[torch.randn(p.shape, generator=gen) * SCALES[step] for p in params] for step in range(STEPS)]
    case = {"optimizer": optimizer, "options": options, "groups": groups, "save_after": save_after,
            "grads": [], "expected": None}
    if sparse:
        case["param"] = array(params[0])
        case["grads"] = [{"rows": g[0][0], "values": array(g[0][1])} for g in grads]
    else:
        case["params"] = [array(p) for p in params]
        case["grads"] = [[array(g) for g in gs] for gs in grads]

    def set_grads(ps, gs):
        for p, g in zip(ps, gs):
            if sparse:
                p.grad = torch.sparse_coo_tensor([g[0]], g[1], p.shape).coalesce()
            else:
                p.grad = g.clone()

    opt = make_optimizer(optimizer, params, options, groups)
    for step in range(save_after):
        set_grads(params, grads[step])
        opt.step()
    case["state"] = state_of(opt, params)
    saved = copy.deepcopy(opt.state_dict())
    fresh = [p.detach().clone().requires_grad_() for p in params]
    resumed = make_optimizer(optimizer, fresh, options, groups)
    resumed.load_state_dict(saved)
    for step in range(save_after, len(grads)):
        set_grads(fresh, grads[step])
        resumed.step()
    case["expected"] = [array(p.detach()) for p in fresh]
    return case


def training_loop_cases():
    gen = torch.Generator().manual_seed(4321)
    groups = {
        "adam_groups": group_case(gen, "Adam", {"lr": 0.05},
                                  [{"params": [0], "lr": 0.01}, {"params": [1], "weight_decay": 0.1}]),
        "adamw_groups": group_case(gen, "AdamW", {"lr": 0.01},
                                   [{"params": [0], "lr": 0.02, "weight_decay": 0.5}, {"params": [1]}]),
        "adam_amsgrad_groups": group_case(gen, "Adam", {"lr": 0.01, "amsgrad": True},
                                          [{"params": [0]}, {"params": [1], "lr": 0.1}]),
        "sgd_groups": group_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9},
                                 [{"params": [0], "lr": 0.05}, {"params": [1], "lr": 0.2, "weight_decay": 0.1}]),
    }
    schedules = {
        "step_7_half": schedule_case([["StepLR", {"step_size": 7, "gamma": 0.5}]]),
        "step_3": schedule_case([["StepLR", {"step_size": 3}]]),
        "cosine_10": schedule_case([["CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}]]),
        "cosine_25": schedule_case([["CosineAnnealingLR", {"T_max": 25}]]),
        "linear_warmup": schedule_case([["LinearLR", {"start_factor": 0.1, "end_factor": 1.0, "total_iters": 10}]]),
        "linear_decay": schedule_case([["LinearLR", {"start_factor": 1.0, "end_factor": 0.02, "total_iters": 50}]]),
        "linear_default": schedule_case([["LinearLR", {}]]),
        "step_with_set_lr": schedule_case([["StepLR", {"step_size": 4, "gamma": 0.5}]], set_lr=[10, 0, 3.0]),
        "warmup_then_cosine": schedule_case([["LinearLR", {"start_factor": 0.2, "total_iters": 5}],
                                             ["CosineAnnealingLR", {"T_max": 30, "eta_min": 0.0005}]]),
    }
    scheduled = {
        "adam_steplr": group_case(gen, "Adam", {"lr": 0.05},
                                  [{"params": [0]}, {"params": [1], "lr": 0.01}],
                                  scheduler=["StepLR", {"step_size": 2, "gamma": 0.5}], steps=8),
        "sgd_cosine": group_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True},
                                 [{"params": [0]}, {"params": [1], "weight_decay": 0.01}],
                                 scheduler=["CosineAnnealingLR", {"T_max": 4, "eta_min": 0.01}], steps=8),
    }
    state = {
        "adam_amsgrad": state_case(gen, "Adam", {"lr": 0.01, "betas": [0.8, 0.99], "amsgrad": True}),
        "adamw_groups": state_case(gen, "AdamW", {"lr": 0.01},
                                   groups=[{"params": [0], "lr": 0.03}, {"params": [1], "weight_decay": 0.2}]),
        "sgd_momentum_groups": state_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1},
                                          groups=[{"params": [0]}, {"params": [1], "lr": 0.05}]),
        "sparse_adam": state_case(gen, "SparseAdam", {"lr": 0.05}, sparse=True),
    }
    return {"groups": groups, "schedules": schedules, "scheduled": scheduled, "state": state}


def main():
    gen = torch.Generator().manual_seed(1234)
    dense = {
        "sgd_plain": dense_case(gen, "SGD", {"lr": 0.1}),
        "sgd_momentum": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9}),
        "sgd_momentum_dampening": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3}),
        "sgd_nesterov": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
        "sgd_weight_decay": dense_case(gen, "SGD", {"lr": 0.1, "weight_decay": 0.1}),
        "sgd_momentum_weight_decay": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1}),
        "sgd_momentum_missing_grad": dense_case(gen, "SGD", {"lr": 0.1, "momentum": 0.9},
                                                missing_bias_grad_at=2),
        "adam": dense_case(gen, "Adam", {"lr": 0.01}),
        "adam_weight_decay": dense_case(gen, "Adam", {"lr": 0.01, "weight_decay": 0.1}),
        "adamw": dense_case(gen, "AdamW", {"lr": 0.01, "weight_decay": 0.1}),
        "adam_amsgrad": dense_case(gen, "Adam", {"lr": 0.01, "betas": [0.8, 0.99], "amsgrad": True}),
        "adam_missing_grad": dense_case(gen, "Adam", {"lr": 0.01}, missing_bias_grad_at=2),
    }
    sparse = {
        "sparse_adam": sparse_case(gen, "SparseAdam", {"lr": 0.05}),
        "sparse_sgd": sparse_case(gen, "SGD", {"lr": 0.1}),
    }
    out = {"torch_version": torch.__version__, "dense": dense, "sparse": sparse}
    out.update(training_loop_cases())
    write_indented("optim_reference", out, join_rows=True)


if __name__ == "__main__":
    main()
