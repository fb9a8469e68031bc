"""attn.optim against PyTorch 1.13: Adam, AdamW (with parameter groups exempt from weight
decay), clip_grad_norm_ and learning-rate schedules, on every instruction set the CPU has.

attn's AVX2 and AVX-512 Adam kernels round each operation as PyTorch's vectorised CPU
kernels do, so where PyTorch itself runs its AVX2 or AVX-512 kernels the updates must be
identical to the bit; the portable and reference versions must agree to float rounding.
"""
import math

import numpy as np
import pytest
import torch

import attn.optim as optim
from attn._lib import lib

ISAS = {"reference": 0, "portable": 1, "avx2": 2, "avx512": 3, "neon": 4, "neon-dotprod": 5,
        "neon-bf16": 6}
SHAPES = [(7, 5), (5,), (13,), (3, 4, 2), (1,), (129,)]
NO_DECAY = {1, 4}  # indices into SHAPES treated like biases / norm gains


def supported_isas():
    return [name for name, isa in ISAS.items() if lib.attn_isa_supported(isa)]


@pytest.fixture(params=supported_isas())
def isa(request):
    assert lib.attn_set_isa(ISAS[request.param]) == 0
    yield request.param
    lib.attn_set_isa(-1)


def torch_runs_vectorised_kernels():
    """PyTorch picks its CPU kernels at run time; the bit-exact claim is about its AVX2 and
    AVX-512 ones (not its default or when ATEN_CPU_CAPABILITY lowers it)."""
    config = torch.__config__.show()
    return "CPU capability usage: AVX2" in config or "CPU capability usage: AVX512" in config


def offsets():
    sizes = [int(np.prod(s)) for s in SHAPES]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return sizes, starts


def exempt_ranges():
    sizes, starts = offsets()
    return [(int(starts[i]), sizes[i]) for i in sorted(NO_DECAY)]


def run_both(rng, decoupled, weight_decay, exempt, steps=6, lr=0.01, betas=(0.9, 0.98),
             eps=1e-8, schedule=None):
    """The same updates in torch (one tensor per shape) and attn (one flat buffer). Returns
    (torch params, exp_avg, exp_avg_sq flattened) and attn's (params, m, v)."""
    sizes, starts = offsets()
    total = int(starts[-1])
    init = rng.standard_normal(total).astype(np.float32)
    tensors = [torch.tensor(init[starts[i]:starts[i + 1]].reshape(s), requires_grad=True)
               for i, s in enumerate(SHAPES)]
    make = torch.optim.AdamW if decoupled else torch.optim.Adam
    if exempt:
        groups = [{"params": [t for i, t in enumerate(tensors) if i not in NO_DECAY]},
                  {"params": [t for i, t in enumerate(tensors) if i in NO_DECAY],
                   "weight_decay": 0.0}]
    else:
        groups = [{"params": tensors}]
    opt = make(groups, lr=1.0 if schedule else lr, betas=betas, eps=eps,
               weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: schedule(e + 1)) if schedule else None

    params = init.copy()
    m = np.zeros(total, np.float32)
    v = np.zeros(total, np.float32)
    step = 0
    for _ in range(steps):
        # gradients of magnitudes 1e-6 .. 1, so eps matters for some
        grads = (rng.standard_normal(total) * 10.0 ** rng.uniform(-6, 0, total)).astype(np.float32)
        for i, t in enumerate(tensors):
            t.grad = torch.tensor(grads[starts[i]:starts[i + 1]].reshape(SHAPES[i]))
        opt.step()
        if scheduler:
            scheduler.step()
        rate = schedule(step + 1) if schedule else lr
        step = optim.adam_step(params, grads, m, v, step, lr=rate, betas=betas, eps=eps,
                               weight_decay=weight_decay, decoupled=decoupled,
                               no_decay=exempt_ranges() if exempt else ())
    assert step == steps

    def flat(values):
        return np.concatenate([x.detach().numpy().ravel() for x in values])

    ours = (params, m, v)
    theirs = (flat(tensors), flat(opt.state[t]["exp_avg"] for t in tensors),
              flat(opt.state[t]["exp_avg_sq"] for t in tensors))
    return theirs, ours


def assert_updates_match(isa, theirs, ours):
    for name, t, o in zip(("params", "exp_avg", "exp_avg_sq"), theirs, ours):
        if isa in ("avx2", "avx512") and torch_runs_vectorised_kernels():
            mismatched = np.flatnonzero(t != o)
            assert mismatched.size == 0, (
                f"{isa} {name}: {mismatched.size} of {t.size} differ from torch, first at "
                f"{mismatched[:5]}: {o[mismatched[:5]]} vs {t[mismatched[:5]]}")
        else:
            # float rounding: ~1 ulp per step; m sums terms of either sign and p moves by
            # about lr (<= 0.07 here) per step, so both get an absolute floor as well
            atol = {"params": 1e-7, "exp_avg": 2e-6 * np.max(np.abs(t)), "exp_avg_sq": 0.0}[name]
            np.testing.assert_allclose(o, t, rtol=2e-6, atol=atol, err_msg=f"{isa} {name}")


@pytest.mark.parametrize("decoupled", [False, True], ids=["Adam", "AdamW"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
@pytest.mark.parametrize("exempt", [False, True], ids=["all-decayed", "groups"])
def test_adam_matches_torch(isa, rng, decoupled, weight_decay, exempt):
    theirs, ours = run_both(rng, decoupled, weight_decay, exempt)
    assert_updates_match(isa, theirs, ours)


def test_adam_with_torch_defaults(isa, rng):
    for decoupled in (False, True):
        defaults = torch.optim.AdamW([torch.zeros(1)]).defaults if decoupled else \
            torch.optim.Adam([torch.zeros(1)]).defaults
        theirs, ours = run_both(rng, decoupled, defaults["weight_decay"], exempt=False,
                                lr=defaults["lr"], betas=defaults["betas"], eps=defaults["eps"])
        assert_updates_match(isa, theirs, ours)


def noam(step, factor=2.0, d_model=256, warmup=4):
    """The Annotated Transformer's rate(), counting steps from 1."""
    return factor * (d_model ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5)))


def test_adam_with_noam_schedule_matches_torch_lambda_lr(isa, rng):
    def schedule(step):
        return optim.lr_at("noam", step, factor=2.0, d_model=256, warmup_steps=4)

    theirs, ours = run_both(rng, decoupled=True, weight_decay=0.01, exempt=True, steps=10,
                            schedule=schedule)
    assert_updates_match(isa, theirs, ours)


def test_clip_grad_norm_matches_torch(isa, rng):
    sizes, starts = offsets()
    for max_norm, spread in ((0.5, 1.0), (1e3, 1.0), (1.0, 1e-3)):
        grads = (rng.standard_normal(int(starts[-1])) * spread).astype(np.float32)
        tensors = [torch.zeros(s, requires_grad=True) for s in SHAPES]
        for i, t in enumerate(tensors):
            t.grad = torch.tensor(grads[starts[i]:starts[i + 1]].reshape(SHAPES[i]))
        expected_norm = float(torch.nn.utils.clip_grad_norm_(tensors, max_norm))
        ours = grads.copy()
        norm = optim.clip_grad_norm(ours, max_norm)
        exact = math.sqrt(float(np.sum(grads.astype(np.float64) ** 2)))
        assert norm == pytest.approx(exact, rel=1e-14)
        assert norm == pytest.approx(expected_norm, rel=1e-6)  # torch sums in float
        clipped = np.concatenate([t.grad.numpy().ravel() for t in tensors])
        np.testing.assert_allclose(ours, clipped, rtol=1e-6, atol=0)
        if max_norm > exact:
            assert np.array_equal(ours, grads)
        assert optim.grad_norm(ours) == pytest.approx(min(exact, max_norm), rel=1e-6)


def test_scale_grads_averages_accumulated_batches(isa, rng):
    grads = rng.standard_normal(1001).astype(np.float32)
    ours = grads.copy()
    optim.scale_grads(ours, 1.0 / 4)
    assert np.array_equal(ours, grads * np.float32(0.25))


def test_noam_and_inverse_sqrt_follow_their_formulas():
    for step in [1, 2, 3, 4, 5, 100, 10 ** 6]:
        assert optim.lr_at("noam", step, factor=2.0, d_model=256, warmup_steps=4) == \
            pytest.approx(noam(step), rel=1e-14)
        peak = 7e-4
        expected = peak * min(step / 4000, math.sqrt(4000 / step))
        assert optim.lr_at("inverse_sqrt", step, lr=peak, warmup_steps=4000) == \
            pytest.approx(expected, rel=1e-14)
    assert optim.lr_at("constant", 17, lr=3e-4) == 3e-4


def torch_lrs(make_scheduler, epochs):
    """The learning rate torch uses at epochs 0 .. epochs - 1 (base lr 1)."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    scheduler = make_scheduler(opt)
    rates = []
    for _ in range(epochs):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return rates


def test_cosine_matches_torch_schedulers():
    # decay: CosineAnnealingLR's epoch e is attn's step e when there is no warm-up
    total, floor = 50, 0.01
    rates = torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total,
                                                                           eta_min=floor),
                      total + 1)
    for step, rate in enumerate(rates):
        ours = optim.lr_at("cosine", step, lr=1.0, warmup_steps=0, total_steps=total,
                           min_lr=floor)
        assert ours == pytest.approx(rate, rel=1e-12, abs=1e-15), step
    # warm-up: LinearLR from 1/w reaches 1 after w - 1 epochs; epoch e is attn's step e + 1
    warmup = 8
    rates = torch_lrs(lambda o: torch.optim.lr_scheduler.LinearLR(
        o, start_factor=1.0 / warmup, end_factor=1.0, total_iters=warmup - 1), warmup)
    for epoch, rate in enumerate(rates):
        ours = optim.lr_at("cosine", epoch + 1, lr=1.0, warmup_steps=warmup, total_steps=100)
        assert ours == pytest.approx(rate, rel=1e-12), epoch


def test_cosine_over_a_time_budget_through_the_binding():
    # The binding's struct must match the C one field for field, or the library reads past it.
    for step, seconds in [(0, 0.0), (5, 0.0), (10, 0.0), (50, 30.0), (50, 60.0), (50, 99.0)]:
        warm = min(1.0, step / 10)
        expected = warm * (0.1 + (1.0 - 0.1) * (1 + math.cos(math.pi * min(1.0, seconds / 60)))
                           / 2)
        ours = optim.lr_at_time("cosine", step, seconds, lr=1.0, warmup_steps=10, min_lr=0.1,
                                total_seconds=60.0)
        assert ours == pytest.approx(expected, rel=1e-14, abs=1e-300), (step, seconds)
    assert optim.lr_at_time("cosine", 50, 1234.0, lr=1.0, warmup_steps=10, total_steps=100) == \
        optim.lr_at("cosine", 50, lr=1.0, warmup_steps=10, total_steps=100)
    with pytest.raises(ValueError, match="where it ends"):
        optim.lr_at_time("cosine", 50, 1.0, lr=1.0, warmup_steps=10)
    with pytest.raises(ValueError, match="not both"):
        optim.lr_at_time("cosine", 50, 1.0, lr=1.0, total_steps=100, total_seconds=60.0)
    with pytest.raises(ValueError, match="seconds"):
        optim.lr_at_time("cosine", 50, -1.0, lr=1.0, total_seconds=60.0)


def test_bad_arguments_raise_value_errors():
    p = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="lr"):
        optim.adam_step(p, p.copy(), p.copy(), p.copy(), 0, lr=-1.0)
    with pytest.raises(ValueError, match="beta1"):
        optim.adam_step(p, p.copy(), p.copy(), p.copy(), 0, betas=(1.0, 0.999))
    with pytest.raises(ValueError, match="beta2"):
        optim.adam_step(p, p.copy(), p.copy(), p.copy(), 0, betas=(0.9, -0.1))
    with pytest.raises(ValueError, match="eps"):
        optim.adam_step(p, p.copy(), p.copy(), p.copy(), 0, eps=0.0)
    with pytest.raises(ValueError, match="no_decay"):
        optim.adam_step(p, p.copy(), p.copy(), p.copy(), 0, weight_decay=0.1,
                        no_decay=[(2, 1), (0, 1)])
    with pytest.raises(ValueError, match="grads"):
        optim.adam_step(p, np.zeros(3, np.float32), p.copy(), p.copy(), 0)
    with pytest.raises(ValueError, match="params"):
        optim.adam_step(p.astype(np.float64), p.copy(), p.copy(), p.copy(), 0)
    with pytest.raises(ValueError, match="max_norm"):
        optim.clip_grad_norm(p, 0.0)
    with pytest.raises(ValueError, match="grads"):
        optim.clip_grad_norm(np.zeros(8, np.float32)[::2], 1.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        optim.lr_at("noam", 1, factor=1.0, d_model=8, warmup_steps=0)
    with pytest.raises(ValueError, match="kind"):
        optim.lr_at("linear", 1)
