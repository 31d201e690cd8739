#!/usr/bin/python3
"""Writes tests/data/layers_reference.json and tests/data/rnn_reference.safetensors:
what PyTorch gives for convolution, pooling, unfold, softplus, log_sigmoid,
logsumexp, the binary cross-entropies, batch norm, and the GRU and LSTM layers
and cells -- values, gradients, running statistics -- for tests/test_ops_nn.cpp,
tests/test_nn_conv.cpp and tests/test_nn_rnn.cpp.

Run with Debian's python3-torch:  /usr/bin/python3 tests/tools/gen_layers_reference.py

Inputs and weights are drawn here and stored in the file, so the C++ side uses
the same numbers. An op case ("ops") holds its inputs, the output, a random w
and the gradients of sum(out * w) for every input. A module case holds the
state dict by name (buffers included), and the same for the module.

The safetensors file holds a GRU's and an LSTM's state dicts as PyTorch names
them, prefixed "gru." and "lstm." (written with Hugging Face's safetensors
package when it is installed, else with the numpy writer in safetensors_np.py);
the JSON holds the input and PyTorch's outputs for it ("checkpoint").
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

import safetensors_np
from reference import f32_values, write

torch.manual_seed(31)


def arr(t):
    """A float tensor as JSON, each value with the 9 digits that read back to its float32."""
    t = t.detach().to(torch.float32)
    return {"shape": list(t.shape), "data": f32_values(t)}


def op_case(fn, inputs, nograd=(), **params):
    """fn on copies of `inputs` that require grad (those whose position is in
    `nograd` do not); the loss is sum(out * w)."""
    xs = [x.clone().requires_grad_(i not in nograd) for i, x in enumerate(inputs)]
    out = fn(*xs)
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    c = {"inputs": [arr(x) for x in xs], "w": arr(w), "out": arr(out),
         "grads": [arr(x.grad) if x.grad is not None else None for x in xs]}
    c.update(params)
    return c


ops = {}

# ---- conv2d: (input shape, weight shape, bias, stride, padding, dilation, groups)
conv2d_cases = {
    "plain": ([2, 3, 7, 6], [4, 3, 3, 3], True, 1, 0, 1, 1),
    "stride2_pad1": ([2, 3, 8, 7], [5, 3, 3, 3], True, 2, 1, 1, 1),
    "mixed": ([1, 2, 9, 8], [3, 2, 3, 2], True, [2, 1], [1, 2], [2, 1], 1),
    "groups2": ([2, 4, 6, 6], [6, 2, 3, 3], True, 1, 1, 1, 2),
    "depthwise": ([2, 3, 5, 5], [3, 1, 3, 3], False, 1, 1, 1, 3),
    "batch1_odd_nobias": ([1, 1, 5, 7], [2, 1, 2, 3], False, 1, 0, 1, 1),
    "pointwise": ([2, 3, 4, 5], [6, 3, 1, 1], True, 1, 0, 1, 1),
    "pointwise_stride2": ([2, 3, 5, 5], [4, 3, 1, 1], True, 2, 0, 1, 1),
    "unbatched": ([3, 6, 5], [2, 3, 3, 3], True, 1, 1, 1, 1),
    "stride3_dilation2": ([2, 2, 11, 10], [3, 2, 3, 3], True, 3, 2, 2, 1),
    "kernel_is_input": ([2, 2, 3, 3], [4, 2, 3, 3], True, 1, 0, 1, 1),
}
for name, (xs, ws, bias, s, p, d, g) in conv2d_cases.items():
    inputs = [torch.randn(xs), torch.randn(ws)] + ([torch.randn(ws[0])] if bias else [])
    ops["conv2d_" + name] = op_case(
        lambda x, w, b=None: F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=g), inputs,
        stride=s, padding=p, dilation=d, groups=g)

conv1d_cases = {
    "stride2_pad1": ([2, 3, 10], [4, 3, 3], True, 2, 1, 1, 1),
    "dilation2_groups3": ([2, 3, 9], [6, 1, 2], True, 1, 0, 2, 3),
    "unbatched_nobias": ([3, 7], [2, 3, 4], False, 1, 2, 1, 1),
}
for name, (xs, ws, bias, s, p, d, g) in conv1d_cases.items():
    inputs = [torch.randn(xs), torch.randn(ws)] + ([torch.randn(ws[0])] if bias else [])
    ops["conv1d_" + name] = op_case(
        lambda x, w, b=None: F.conv1d(x, w, b, stride=s, padding=p, dilation=d, groups=g), inputs,
        stride=s, padding=p, dilation=d, groups=g)

# ---- unfold
for name, (xs, k, d, p, s) in {"mixed": ([2, 3, 6, 5], [2, 3], [1, 2], 1, [2, 1]),
                               "unbatched": ([2, 4, 4], 2, 1, 0, 2)}.items():
    ops["unfold_" + name] = op_case(lambda x: F.unfold(x, k, dilation=d, padding=p, stride=s), [torch.randn(xs)],
                                    kernel_size=k, dilation=d, padding=p, stride=s)

# ---- pooling. Inputs in quarters (-2 .. 2) hold ties; max takes the first.
def quarters(*shape):
    return torch.randint(-8, 9, shape).float() / 4


max2d = {
    "k2": ([2, 3, 7, 6], 2, None, 0, 1, False),
    "k3_s2_p1": ([2, 2, 7, 8], 3, 2, 1, 1, False),
    "mixed_ceil": ([1, 2, 7, 9], [2, 3], [1, 2], [1, 1], [2, 1], True),
    "ceil_s2": ([2, 1, 5, 5], 2, 2, 0, 1, True),
    "unbatched": ([3, 4, 5], 2, 1, 0, 1, False),
}
for name, (xs, k, s, p, d, ceil) in max2d.items():
    for values in ["randn", "ties"]:
        x = torch.randn(xs) if values == "randn" else quarters(*xs)
        ops["max_pool2d_%s_%s" % (name, values)] = op_case(
            lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode=ceil), [x],
            kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
ops["max_pool1d_k3_s2_p1_ceil"] = op_case(lambda x: F.max_pool1d(x, 3, 2, 1, 1, ceil_mode=True),
                                          [quarters(2, 3, 10)], kernel_size=3, stride=2, padding=1, dilation=1,
                                          ceil_mode=True)
ops["max_pool1d_dilation2"] = op_case(lambda x: F.max_pool1d(x, 2, 1, 0, 2), [torch.randn(3, 7)], kernel_size=2,
                                      stride=1, padding=0, dilation=2, ceil_mode=False)

avg2d = {
    "k2": ([2, 3, 6, 6], 2, None, 0, False, True, None),
    "k3_s2_p1": ([2, 2, 7, 8], 3, 2, 1, False, True, None),
    "k3_s2_p1_nopad": ([2, 2, 7, 8], 3, 2, 1, False, False, None),
    "ceil": ([1, 2, 5, 7], [2, 3], [2, 2], [1, 1], True, True, None),
    "ceil_nopad": ([1, 2, 5, 7], [2, 3], [2, 2], [1, 1], True, False, None),
    "divisor": ([2, 1, 5, 5], 3, 1, 1, False, True, 5),
    "unbatched": ([3, 5, 4], 2, 1, 0, False, True, None),
}
for name, (xs, k, s, p, ceil, cip, div) in avg2d.items():
    ops["avg_pool2d_" + name] = op_case(
        lambda x: F.avg_pool2d(x, k, s, p, ceil, cip, div), [torch.randn(xs)], kernel_size=k, stride=s, padding=p,
        ceil_mode=ceil, count_include_pad=cip, divisor_override=div)
ops["avg_pool1d_k3_s2_p1"] = op_case(lambda x: F.avg_pool1d(x, 3, 2, 1, True, False), [torch.randn(2, 3, 10)],
                                     kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)

for name, (xs, out) in {"3x2": ([2, 3, 7, 5], [3, 2]), "global": ([2, 4, 3, 5], 1),
                        "larger": ([1, 2, 3, 4], [5, 6]), "unbatched": ([2, 5, 5], 3)}.items():
    ops["adaptive_avg_pool2d_" + name] = op_case(lambda x: F.adaptive_avg_pool2d(x, out), [torch.randn(xs)],
                                                 output_size=out)
ops["adaptive_avg_pool1d_4"] = op_case(lambda x: F.adaptive_avg_pool1d(x, 4), [torch.randn(2, 3, 10)], output_size=4)

# ---- activations, logsumexp, binary losses
wide = torch.cat([torch.randn(12) * 4, torch.tensor([0.0, 19.5, 20.5, -25.0, 60.0])])
ops["softplus"] = op_case(lambda x: F.softplus(x), [wide], beta=1.0, threshold=20.0)
ops["softplus_beta2_threshold5"] = op_case(lambda x: F.softplus(x, 2.0, 5.0), [wide], beta=2.0, threshold=5.0)
ops["log_sigmoid"] = op_case(F.logsigmoid, [wide])
ops["logsumexp_dim1"] = op_case(lambda x: torch.logsumexp(x, 1), [torch.randn(4, 6) * 3], dim=1, keepdim=False)
ops["logsumexp_dim0_keepdim"] = op_case(lambda x: torch.logsumexp(x, 0, keepdim=True), [torch.randn(4, 6) * 3],
                                        dim=0, keepdim=True)
ops["logsumexp_3d_last"] = op_case(lambda x: torch.logsumexp(x, -1), [torch.randn(2, 3, 5) * 10], dim=-1,
                                   keepdim=False)

probs = torch.rand(4, 3) * 0.98 + 0.01
targets = torch.rand(4, 3)
for red in ["mean", "sum", "none"]:
    ops["bce_" + red] = op_case(lambda x, t: F.binary_cross_entropy(x, t, reduction=red), [probs, targets],
                                reduction=red)
    ops["bce_weight_" + red] = op_case(
        lambda x, t, w: F.binary_cross_entropy(x, t, weight=w, reduction=red), [probs, targets, torch.rand(3)],
        nograd=(2,), reduction=red)
logits = torch.randn(4, 3) * 3
hard = (torch.rand(4, 3) > 0.5).float()
for red in ["mean", "sum", "none"]:
    ops["bce_logits_" + red] = op_case(lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=red),
                                       [logits, targets], reduction=red)
    ops["bce_logits_weights_" + red] = op_case(
        lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, weight=w, pos_weight=pw, reduction=red),
        [logits, hard, torch.rand(4, 1) + 0.5, torch.rand(3) * 3], nograd=(2, 3), reduction=red)
ops["bce_logits_pos_weight_soft"] = op_case(
    lambda x, t, pw: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw), [logits, targets, torch.rand(3) * 3],
    nograd=(2,), reduction="mean")


# ---- batch_norm, functional: the output, the gradients, and the running statistics after the call
def bn_case(shape, training, running, affine, momentum=0.1, eps=1e-5):
    c = shape[1]
    x = torch.randn(shape) * 2 + 1
    rm, rv = (torch.randn(c), torch.rand(c) + 0.5) if running else (None, None)
    inputs = [x] + ([torch.rand(c) + 0.5, torch.randn(c)] if affine else [])
    rm_in = rm.clone() if running else None
    rv_in = rv.clone() if running else None
    case = op_case(lambda x, w=None, b=None: F.batch_norm(x, rm, rv, w, b, training, momentum, eps), inputs,
                   training=training, momentum=momentum, eps=eps)
    case["running_in"] = [arr(rm_in), arr(rv_in)] if running else None
    case["running_out"] = [arr(rm), arr(rv)] if running else None
    return case


ops["batch_norm_train_2d"] = bn_case([6, 4], True, True, True)
ops["batch_norm_train_3d"] = bn_case([3, 4, 5], True, True, True, momentum=0.3)
ops["batch_norm_train_4d"] = bn_case([2, 3, 4, 5], True, True, True)
ops["batch_norm_train_no_running"] = bn_case([2, 3, 4, 5], True, False, True)
ops["batch_norm_train_no_affine"] = bn_case([4, 3, 3, 3], True, True, False, eps=1e-3)
ops["batch_norm_eval_4d"] = bn_case([2, 3, 4, 5], False, True, True)
ops["batch_norm_eval_no_affine"] = bn_case([5, 4], False, True, False)


# ---- modules: the state dict, and outputs and gradients of sum(out * w)
def randomized(model):
    """Batch norms start at 1 and 0; other numbers test more."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_()
                if m.track_running_stats:
                    m.running_mean.normal_()
                    m.running_var.uniform_(0.5, 2.0)
    return model


def state(model):
    return [[k, arr(v.float())] for k, v in model.state_dict().items()]


def module_case(model, x, train=False):
    """The module in train or eval mode on x: state before, output, gradients of
    sum(out * w) for the parameters (by name) and the input, state after."""
    model.train(train)
    model.zero_grad()
    x = x.clone().requires_grad_(True)
    c = {"state_dict": state(model), "input": arr(x), "train": train}
    out = model(x)
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    c.update({"w": arr(w), "out": arr(out), "grad_input": arr(x.grad),
              "grads": [[k, arr(p.grad)] for k, p in model.named_parameters()],
              "state_after": state(model)})
    return c


modules = {}
modules["conv2d"] = module_case(nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.randn(2, 3, 7, 7))
modules["conv1d_groups"] = module_case(nn.Conv1d(4, 6, 3, padding=1, groups=2, bias=False), torch.randn(2, 4, 9))
cnn = randomized(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3)))
modules["cnn_eval"] = module_case(cnn, torch.randn(3, 1, 8, 8))
modules["cnn_train"] = module_case(cnn, torch.randn(3, 1, 8, 8), train=True)
modules["pools"] = module_case(nn.Sequential(nn.MaxPool2d(3, stride=2, padding=1), nn.AvgPool2d(2, ceil_mode=True)),
                               torch.randn(2, 3, 9, 9))
modules["pools1d"] = module_case(nn.Sequential(nn.MaxPool1d(2), nn.AvgPool1d(3, stride=1, padding=1),
                                               nn.AdaptiveAvgPool1d(2)), torch.randn(2, 3, 9))
modules["batch_norm1d_train"] = module_case(randomized(nn.BatchNorm1d(5)), torch.randn(4, 5, 3), train=True)
modules["batch_norm1d_eval_2d"] = module_case(randomized(nn.BatchNorm1d(5)), torch.randn(4, 5))


def bn_steps(bn, shape, steps=3):
    """Training steps then one eval step: the inputs, each output, and the state after each."""
    randomized(bn)
    c = {"state_dict": state(bn), "steps": []}
    for i in range(steps + 1):
        bn.train(i < steps)
        x = torch.randn(shape) * 3 + 2
        out = bn(x)
        c["steps"].append({"train": i < steps, "input": arr(x), "out": arr(out), "state_after": state(bn)})
    return c


modules["batch_norm2d_steps"] = bn_steps(nn.BatchNorm2d(3), [4, 3, 2, 3])
modules["batch_norm2d_cumulative"] = bn_steps(nn.BatchNorm2d(3, momentum=None), [4, 3, 2, 3])
modules["batch_norm1d_no_tracking"] = bn_steps(nn.BatchNorm1d(4, track_running_stats=False, affine=False), [5, 4])

# Recurrent layers and cells: (output, h_n[, c_n]) and the gradients of
# sum(output * w) + sum(h_n * wh) (+ sum(c_n * wc)).


def rnn_case(model, x, state=None, train=False):
    model.train(train)
    x = x.clone().requires_grad_(True)
    c = {"state_dict": state_list(model), "input": arr(x)}
    if state is not None:
        state = tuple(s.clone().requires_grad_(True) for s in state) if isinstance(state, tuple) \
            else state.clone().requires_grad_(True)
        c["state"] = [arr(s) for s in state] if isinstance(state, tuple) else [arr(state)]
    out = model(x, state) if state is not None else model(x)
    outs = list(out) if isinstance(out, tuple) else [out]
    if len(outs) == 2 and isinstance(outs[1], tuple):  # LSTM: (output, (h, c))
        outs = [outs[0], *outs[1]]
    ws = [torch.randn(o.shape) for o in outs]
    sum((o * w).sum() for o, w in zip(outs, ws)).backward()
    c.update({"outs": [arr(o) for o in outs], "ws": [arr(w) for w in ws], "grad_input": arr(x.grad),
              "grads": [[k, arr(p.grad)] for k, p in model.named_parameters()]})
    if state is not None:
        c["grad_state"] = [arr(s.grad) for s in state] if isinstance(state, tuple) else [arr(state.grad)]
    return c


def state_list(model):
    return [[k, arr(v)] for k, v in model.state_dict().items()]


rnns = {}
rnns["gru_cell"] = rnn_case(nn.GRUCell(4, 5), torch.randn(3, 4), torch.randn(3, 5))
rnns["gru_cell_unbatched_nobias"] = rnn_case(nn.GRUCell(4, 5, bias=False), torch.randn(4), torch.randn(5))
rnns["lstm_cell"] = rnn_case(nn.LSTMCell(4, 5), torch.randn(3, 4), (torch.randn(3, 5), torch.randn(3, 5)))
rnns["lstm_cell_zero_state"] = rnn_case(nn.LSTMCell(3, 2), torch.randn(2, 3))
rnns["gru"] = rnn_case(nn.GRU(4, 5), torch.randn(6, 3, 4))
rnns["gru_2layers_batch_first_h0"] = rnn_case(nn.GRU(4, 5, num_layers=2, batch_first=True), torch.randn(3, 6, 4),
                                              torch.randn(2, 3, 5))
rnns["gru_bidirectional_2layers"] = rnn_case(nn.GRU(3, 4, num_layers=2, bidirectional=True), torch.randn(5, 2, 3))
rnns["gru_unbatched"] = rnn_case(nn.GRU(3, 4, num_layers=2), torch.randn(5, 3), torch.randn(2, 4))
rnns["lstm"] = rnn_case(nn.LSTM(4, 5), torch.randn(6, 3, 4))
rnns["lstm_2layers_batch_first_state"] = rnn_case(nn.LSTM(4, 5, num_layers=2, batch_first=True, bias=False),
                                                  torch.randn(3, 6, 4), (torch.randn(2, 3, 5), torch.randn(2, 3, 5)))
rnns["lstm_bidirectional"] = rnn_case(nn.LSTM(3, 4, bidirectional=True, batch_first=True), torch.randn(2, 5, 3))
rnns["bce_with_logits_loss"] = None  # filled below: not a recurrent layer, but a module with buffers
loss = nn.BCEWithLogitsLoss(weight=torch.rand(3) + 0.5, pos_weight=torch.rand(3) * 2 + 0.5)
lx, lt = torch.randn(4, 3, requires_grad=True), (torch.rand(4, 3) > 0.5).float()
lv = loss(lx, lt)
lv.backward()
rnns["bce_with_logits_loss"] = {"state_dict": state_list(loss), "input": arr(lx), "target": arr(lt),
                                "out": arr(lv), "grad_input": arr(lx.grad)}

# ---- a PyTorch checkpoint of a GRU and an LSTM, through safetensors
gru = nn.GRU(5, 8, num_layers=2, batch_first=True)
lstm = nn.LSTM(5, 6, num_layers=2, bidirectional=True)
tensors = {"gru." + k: v.detach().numpy() for k, v in gru.state_dict().items()}
tensors.update({"lstm." + k: v.detach().numpy() for k, v in lstm.state_dict().items()})
st_path = os.path.join(os.path.dirname(__file__), "..", "data", "rnn_reference.safetensors")
safetensors_np.save(st_path, tensors, {"written_by": "tests/tools/gen_layers_reference.py"})
print("wrote", os.path.normpath(st_path))
with torch.no_grad():
    x_gru, x_lstm = torch.randn(3, 7, 5), torch.randn(7, 3, 5)
    g_out, g_h = gru(x_gru)
    l_out, (l_h, l_c) = lstm(x_lstm)
checkpoint = {"gru_input": arr(x_gru), "gru_output": arr(g_out), "gru_h_n": arr(g_h),
              "lstm_input": arr(x_lstm), "lstm_output": arr(l_out), "lstm_h_n": arr(l_h), "lstm_c_n": arr(l_c)}

write("layers_reference", ops, modules=modules, rnns=rnns, checkpoint=checkpoint)
