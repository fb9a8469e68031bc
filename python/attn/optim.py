"""Optimizer pieces on flat NumPy buffers: attn_adam_step, gradient norm and clipping,
gradient scaling, the exponential smoothing of the weights (attn_ema_update), and the
learning-rate schedules (attn_lr_at, attn_lr_at_time).

The update functions work in place, so the arrays they change must already be C-contiguous
float32 (a copy would silently lose the update); any shape is taken as its flat buffer.
"""
import ctypes

import numpy as np

from ._lib import as_float32, c_float_p, check, lib, ptr

ADAM = 0
ADAMW = 1


class ParamRange(ctypes.Structure):
    """attn_param_range: count parameters from offset in the flat buffer."""

    _fields_ = [("offset", ctypes.c_int64), ("count", ctypes.c_int64)]


class AdamOptions(ctypes.Structure):
    """attn_adam_options."""

    _fields_ = [
        ("variant", ctypes.c_int),
        ("lr", ctypes.c_double),
        ("beta1", ctypes.c_double),
        ("beta2", ctypes.c_double),
        ("eps", ctypes.c_double),
        ("weight_decay", ctypes.c_double),
        ("no_decay", ctypes.POINTER(ParamRange)),
        ("no_decay_count", ctypes.c_int64),
    ]


class LrSchedule(ctypes.Structure):
    """attn_lr_schedule."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("lr", ctypes.c_double),
        ("factor", ctypes.c_double),
        ("d_model", ctypes.c_int64),
        ("warmup_steps", ctypes.c_int64),
        ("total_steps", ctypes.c_int64),
        ("min_lr", ctypes.c_double),
        ("total_seconds", ctypes.c_double),
        ("warmup_share", ctypes.c_double),
    ]


_LR_KINDS = {"constant": 0, "noam": 1, "inverse_sqrt": 2, "cosine": 3}

lib.attn_adam_step.restype = ctypes.c_int
lib.attn_adam_step.argtypes = [ctypes.POINTER(AdamOptions), ctypes.POINTER(ctypes.c_int64),
                               ctypes.c_int64, c_float_p, c_float_p, c_float_p, c_float_p]
lib.attn_grad_norm.restype = ctypes.c_int
lib.attn_grad_norm.argtypes = [ctypes.c_int64, c_float_p, ctypes.POINTER(ctypes.c_double)]
lib.attn_clip_grad_norm.restype = ctypes.c_int
lib.attn_clip_grad_norm.argtypes = [ctypes.c_int64, c_float_p, ctypes.c_double,
                                    ctypes.POINTER(ctypes.c_double)]
lib.attn_scale_grads.restype = ctypes.c_int
lib.attn_scale_grads.argtypes = [ctypes.c_int64, c_float_p, ctypes.c_float]
lib.attn_ema_update.restype = ctypes.c_int
lib.attn_ema_update.argtypes = [ctypes.c_int64, c_float_p, c_float_p, ctypes.c_double,
                                ctypes.c_int64]
lib.attn_lr_at.restype = ctypes.c_int
lib.attn_lr_at.argtypes = [ctypes.POINTER(LrSchedule), ctypes.c_int64,
                           ctypes.POINTER(ctypes.c_double)]
lib.attn_lr_at_time.restype = ctypes.c_int
lib.attn_lr_at_time.argtypes = [ctypes.POINTER(LrSchedule), ctypes.c_int64, ctypes.c_double,
                                ctypes.POINTER(ctypes.c_double)]


def _in_place(name, array):
    """The array itself, checked to be a writeable C-contiguous float32 buffer."""
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise ValueError(f"{name}: expected a float32 numpy array, got "
                         f"{getattr(array, 'dtype', type(array).__name__)}")
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError(f"{name}: must be C-contiguous and writeable (it is updated in place)")
    return array


def adam_step(params, grads, m, v, step, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
              weight_decay=0.0, decoupled=False, no_decay=()):
    """One Adam (decoupled=False, as torch.optim.Adam) or AdamW (decoupled=True) update of
    params, m and v in place; step counts the updates made before this one. no_decay lists
    (offset, count) ranges of the flat buffer exempt from weight decay, sorted and disjoint.
    Returns the new step count."""
    params = _in_place("params", params)
    m = _in_place("m", m)
    v = _in_place("v", v)
    grads = as_float32("grads", grads)
    for name, array in (("grads", grads), ("m", m), ("v", v)):
        if array.size != params.size:
            raise ValueError(f"{name}: {array.size} values for {params.size} parameters")
    ranges = (ParamRange * max(1, len(no_decay)))(*[ParamRange(o, c) for o, c in no_decay])
    options = AdamOptions(ADAMW if decoupled else ADAM, lr, betas[0], betas[1], eps,
                          weight_decay, ranges if no_decay else None, len(no_decay))
    counter = ctypes.c_int64(step)
    check(lib.attn_adam_step(ctypes.byref(options), ctypes.byref(counter), params.size,
                             ptr(params), ptr(grads), ptr(m), ptr(v)), "attn_adam_step")
    return counter.value


def grad_norm(grads):
    """sqrt(sum g^2) over the whole buffer, summed in double."""
    grads = as_float32("grads", grads)
    norm = ctypes.c_double()
    check(lib.attn_grad_norm(grads.size, ptr(grads), ctypes.byref(norm)), "attn_grad_norm")
    return norm.value


def clip_grad_norm(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_ on a flat buffer, in place; returns the norm before."""
    grads = _in_place("grads", grads)
    norm = ctypes.c_double()
    check(lib.attn_clip_grad_norm(grads.size, ptr(grads), max_norm, ctypes.byref(norm)),
          "attn_clip_grad_norm")
    return norm.value


def scale_grads(grads, factor):
    """grads *= factor in place (1 / k to average k accumulated batches)."""
    grads = _in_place("grads", grads)
    check(lib.attn_scale_grads(grads.size, ptr(grads), factor), "attn_scale_grads")


def ema_update(smoothed, values, ema, step):
    """Marian's exponential smoothing, as attn train --ema does it after each update, in
    place: smoothed = (1 - d) smoothed + d values with d = max(ema, 1 - (step + 1) / (step +
    10)); step counts the updates made before the one that gave values (the step adam_step
    was given). ema in [0, 1)."""
    smoothed = _in_place("smoothed", smoothed)
    values = as_float32("values", values)
    if values.size != smoothed.size:
        raise ValueError(f"values: {values.size} values for {smoothed.size} smoothed ones")
    check(lib.attn_ema_update(smoothed.size, ptr(smoothed), ptr(values), ema, step),
          "attn_ema_update")


def _schedule(kind, lr, factor, d_model, warmup_steps, total_steps, min_lr, total_seconds):
    if kind not in _LR_KINDS:
        raise ValueError(f"kind: expected one of {sorted(_LR_KINDS)}, got {kind!r}")
    return LrSchedule(_LR_KINDS[kind], lr, factor, d_model, warmup_steps, total_steps, min_lr,
                      total_seconds)


def lr_at(kind, step, lr=0.0, factor=0.0, d_model=0, warmup_steps=0, total_steps=0,
          min_lr=0.0):
    """The learning rate of schedule kind ("constant", "noam", "inverse_sqrt", "cosine") for
    update number step (counting from 1)."""
    schedule = _schedule(kind, lr, factor, d_model, warmup_steps, total_steps, min_lr, 0.0)
    rate = ctypes.c_double()
    check(lib.attn_lr_at(ctypes.byref(schedule), step, ctypes.byref(rate)), "attn_lr_at")
    return rate.value


def lr_at_time(kind, step, seconds, lr=0.0, factor=0.0, d_model=0, warmup_steps=0,
               total_steps=0, min_lr=0.0, total_seconds=0.0):
    """The learning rate for update number step after seconds of training: a "cosine" with
    total_steps 0 is annealed over total_seconds; every other schedule is lr_at(step)."""
    schedule = _schedule(kind, lr, factor, d_model, warmup_steps, total_steps, min_lr,
                         total_seconds)
    rate = ctypes.c_double()
    check(lib.attn_lr_at_time(ctypes.byref(schedule), step, seconds, ctypes.byref(rate)),
          "attn_lr_at_time")
    return rate.value
