"""The layer functions of `mpsrt.nn.functional` beyond activations, conv2d and pooling: batch,
layer, group and instance norm, linear, conv1d, conv_transpose2d, pad, embedding, dropout and
interpolate, with Paddle 3's names and arguments. The math runs in Rust (`mpsrt._C`); this module
only normalizes arguments (ints or lists, Paddle's pad order, channels-last formats).

>>> import mpsrt.nn.functional as F
>>> y = F.layer_norm(mpsrt.randn([2, 8], place='mps'), 8)
"""
from __future__ import annotations

import numpy as np

from .. import _C
from .._ops import _t
from .._tensor import Tensor

__all__ = ["batch_norm", "layer_norm", "group_norm", "instance_norm", "linear", "conv1d",
           "conv_transpose2d", "pad", "embedding", "dropout", "interpolate", "upsample"]


def _opt(t):
    return None if t is None else _t(t)._t


def _channels_last(data_format, ndim) -> bool:
    """True for 'NHWC'-style formats (channel last) on inputs of rank > 2."""
    return data_format is not None and ndim > 2 and str(data_format).upper().endswith("C") \
        and str(data_format).upper() != "NC"


def _to_first(x: Tensor) -> Tensor:
    return x.permute([0, x.ndim - 1] + list(range(1, x.ndim - 1)))


def _to_last(x: Tensor) -> Tensor:
    return x.permute([0] + list(range(2, x.ndim)) + [1])


def _channel_first(fn, x: Tensor, data_format) -> Tensor:
    """Runs `fn` (written for channel-first inputs) on `x` in `data_format`."""
    if _channels_last(data_format, x.ndim):
        return _to_last(fn(_to_first(x)))
    return fn(x)


def _update(running: Tensor, batch: Tensor, momentum: float) -> None:
    """`running = momentum * running + (1 - momentum) * batch`, in place on the Python tensor
    (Paddle updates the running statistics of a training batch norm in place)."""
    new = running * float(momentum) + batch.astype(running.dtype) * (1.0 - float(momentum))
    running._t = new.astype(running.dtype)._t


# ---- normalization ----
def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.9, epsilon=1e-05, data_format="NCHW", use_global_stats=None,
               name=None) -> Tensor:
    """Batch norm over the channel dim. Inference (`training=False`, or `use_global_stats`)
    uses the running statistics; training normalizes with the batch's mean and biased
    variance and updates `running_mean`/`running_var` in place with `momentum` (Paddle's
    convention: `running = momentum * running + (1 - momentum) * batch`)."""
    x = _t(x)
    use_global = (not training) if use_global_stats is None else bool(use_global_stats)
    w, b = _opt(weight), _opt(bias)

    def run(xc: Tensor) -> Tensor:
        if use_global:
            return Tensor._wrap(_C.batch_norm(xc._t, _t(running_mean)._t, _t(running_var)._t,
                                              w, b, float(epsilon)))
        y, m, v = _C.batch_norm_train(xc._t, w, b, float(epsilon))
        if isinstance(running_mean, Tensor):
            _update(running_mean, Tensor._wrap(m), momentum)
        if isinstance(running_var, Tensor):
            _update(running_var, Tensor._wrap(v), momentum)
        return Tensor._wrap(y)

    return _channel_first(run, x, data_format)


def layer_norm(x, normalized_shape, weight=None, bias=None, epsilon=1e-05, name=None) -> Tensor:
    """Normalizes over the trailing `normalized_shape` dims (an int or a list)."""
    shape = [int(normalized_shape)] if isinstance(normalized_shape, (int, np.integer)) \
        else [int(d) for d in normalized_shape]
    return Tensor._wrap(_C.layer_norm(_t(x)._t, shape, _opt(weight), _opt(bias),
                                      float(epsilon)))


def group_norm(x, num_groups, epsilon=1e-05, weight=None, bias=None, data_format="NCHW",
               name=None) -> Tensor:
    """Statistics per (sample, group of channels); per-channel `weight`/`bias`."""
    w, b = _opt(weight), _opt(bias)
    return _channel_first(
        lambda xc: Tensor._wrap(_C.group_norm(xc._t, int(num_groups), w, b, float(epsilon))),
        _t(x), data_format)


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.9, eps=1e-05, data_format="NCHW",
                  name=None) -> Tensor:
    """Statistics per (sample, channel) over the spatial dims; with `use_input_stats=False`
    the given running statistics are used instead (an inference batch norm)."""
    x = _t(x)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("[instance_norm] use_input_stats=False needs running_mean and "
                             "running_var")
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps,
                          data_format)
    w, b = _opt(weight), _opt(bias)
    return _channel_first(
        lambda xc: Tensor._wrap(_C.instance_norm(xc._t, w, b, float(eps))), x, data_format)


# ---- linear and convolution ----
def linear(x, weight, bias=None, name=None) -> Tensor:
    """`x @ weight + bias` with Paddle's `weight` layout `[in_features, out_features]`
    (PyTorch's is transposed)."""
    return Tensor._wrap(_C.linear(_t(x)._t, _t(weight)._t, _opt(bias), True))


def _one(v, op, what) -> int:
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise ValueError(f"[{op}] {what} must be an int or a 1-element list, got {v!r}")
        v = v[0]
    return int(v)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCL",
           name=None) -> Tensor:
    """1-D convolution of (N, C, L) by (out, C/groups, k). `padding`: int, [p], [left, right],
    `'same'` or `'valid'`."""
    same = isinstance(padding, str)
    pads = (0, 0)
    if same:
        if padding.lower() == "valid":
            same = False
        elif padding.lower() != "same":
            raise ValueError(f"[conv1d] padding must be 'same', 'valid' or ints, got {padding!r}")
    else:
        p = [int(padding)] if isinstance(padding, (int, np.integer)) else [int(v) for v in padding]
        if len(p) not in (1, 2):
            raise ValueError(f"[conv1d] padding must be an int, [p] or [left, right], "
                             f"got {padding!r}")
        pads = (p[0], p[-1])
    w, b = _t(weight)._t, _opt(bias)
    s, d = _one(stride, "conv1d", "stride"), _one(dilation, "conv1d", "dilation")
    return _channel_first(
        lambda xc: Tensor._wrap(_C.conv1d(xc._t, w, b, s, pads, same, d, int(groups))),
        _t(x), data_format)


def _pair(v, op, what) -> list:
    p = [int(v)] * 2 if isinstance(v, (int, np.integer)) else [int(e) for e in v]
    if len(p) != 2:
        raise ValueError(f"[{op}] {what} must be an int or a pair, got {v!r}")
    return p


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                     groups=1, output_size=None, data_format="NCHW", name=None) -> Tensor:
    """Transposed 2-D convolution of (N, C, H, W) by (C, out/groups, kh, kw). `padding`: int,
    [ph, pw], [top, bottom, left, right] or `'valid'`; `output_size` picks the output padding."""
    op = "conv_transpose2d"
    if isinstance(padding, str):
        if padding.lower() != "valid":
            raise NotImplementedError(f"[{op}] padding={padding!r}: only 'valid' or explicit "
                                      f"amounts are supported")
        padding = 0
    from .functional import _pads2d
    pads = _pads2d(padding, op)  # (top, left, bottom, right)
    s, d = _pair(stride, op, "stride"), _pair(dilation, op, "dilation")
    w = _t(weight)

    def run(xc: Tensor) -> Tensor:
        opad = _pair(output_padding, op, "output_padding")
        if output_size is not None:
            want = _pair(output_size, op, "output_size") if not isinstance(output_size, int) \
                else [int(output_size)] * 2
            for k in range(2):
                base = (xc.shape[2 + k] - 1) * s[k] - pads[k] - pads[k + 2] + \
                    d[k] * (w.shape[2 + k] - 1) + 1
                opad[k] = want[k] - base
                if not 0 <= opad[k] < max(s[k], d[k]):
                    raise ValueError(f"[{op}] output_size {output_size!r} is not reachable from "
                                     f"input {xc.shape} (sizes {base} to "
                                     f"{base + max(s[k], d[k]) - 1} along dim {2 + k})")
        return Tensor._wrap(_C.conv_transpose2d(xc._t, w._t, _opt(bias), s, pads, opad, d,
                                                int(groups)))

    return _channel_first(run, _t(x), data_format)


# ---- padding ----
def pad(x, pad, mode="constant", value=0.0, data_format=None, pad_from_left_axis=True,
        name=None) -> Tensor:
    """Pads `x` (Paddle's rules). `mode`: 'constant' (negative amounts crop), 'reflect',
    'replicate' or 'circular'. A `pad` of 2*ndim amounts in 'constant' mode covers every dim,
    from the first (`pad_from_left_axis`) or the last; otherwise it covers the spatial dims of
    `data_format` from the last one: [left, right], [left, right, top, bottom], ..."""
    x = _t(x)
    n = x.ndim
    amounts = pad.tolist() if isinstance(pad, Tensor) else [int(p) for p in pad]
    mode = str(mode).lower()
    if mode == "constant" and len(amounts) % 2 == 1:
        amounts.append(0)  # Paddle 3 completes an odd list with a trailing 0
    if len(amounts) % 2 or len(amounts) > 2 * n:
        raise ValueError(f"[pad] pad {list(pad)} needs an even number of amounts, at most "
                         f"2 * ndim = {2 * n} for input {x.shape}")
    pairs = [(amounts[2 * k], amounts[2 * k + 1]) for k in range(len(amounts) // 2)]
    full = [(0, 0)] * n
    spatial = n in (3, 4, 5) and len(pairs) == n - 2
    if mode != "constant" and not spatial:
        raise ValueError(f"[pad] mode {mode!r} needs a 3-D to 5-D input and 2 * (ndim - 2) "
                         f"= {2 * (n - 2)} amounts, got {len(amounts)} for {x.shape}")
    if mode == "constant" and len(pairs) == n:
        dims = list(range(n)) if pad_from_left_axis else list(range(n - 1, -1, -1))
    else:
        # The spatial dims of `data_format`, or (constant, other lengths) the trailing dims.
        last = n - 2 if spatial and _channels_last(data_format, n) else n - 1
        dims = [last - k for k in range(len(pairs))]
    for dim, pr in zip(dims, pairs):
        full[dim] = pr
    return Tensor._wrap(_C.pad(x._t, full, mode, float(value)))


# ---- embedding and dropout ----
def embedding(x, weight, padding_idx=None, max_norm=None, norm_type=2.0, sparse=False,
              scale_grad_by_freq=False, name=None) -> Tensor:
    """Rows of `weight` [num_embeddings, dim] at the ids in `x`; rows for `padding_idx` are
    zeros (Paddle's forward). With `max_norm`, returned rows whose `norm_type`-norm exceeds it
    are scaled to `max_norm` (torch/Paddle's renormalization; `weight` itself is left as is)."""
    w = _t(weight)
    ids = x if isinstance(x, Tensor) else Tensor._wrap(
        _C.from_bytes(np.asarray(x, np.int64).tobytes(), "int64", list(np.shape(x)), "cpu"))
    p = padding_idx
    if p is not None:
        p = int(p)
        num = w.shape[0] if w.ndim == 2 else 0
        if not -num <= p < num:
            raise ValueError(f"[embedding] padding_idx {padding_idx} out of range for "
                             f"{num} embeddings")
        p = p + num if p < 0 else p
    mn = None if max_norm is None else float(max_norm)
    return Tensor._wrap(_C.embedding(ids._t, w._t, p, mn, float(norm_type)))


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None) -> Tensor:
    """Zeroes elements with probability `p` (one draw per position of the `axis` dims when
    given). 'upscale_in_train' scales the kept ones by 1/(1-p) while training and is the
    identity otherwise; 'downscale_in_infer' keeps them as is and scales by (1-p) at
    inference."""
    x = _t(x)
    if mode not in ("upscale_in_train", "downscale_in_infer"):
        raise ValueError(f"[dropout] mode must be 'upscale_in_train' or 'downscale_in_infer', "
                         f"got {mode!r}")
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"[dropout] p must be in [0, 1], got {p}")
    if not training:
        return x if mode == "upscale_in_train" else x * (1.0 - float(p))
    if axis is None:
        shape = list(x.shape)
    else:
        axes = [int(axis)] if isinstance(axis, (int, np.integer)) else [int(a) for a in axis]
        axes = [a + x.ndim if a < 0 else a for a in axes]
        shape = [s if d in axes else 1 for d, s in enumerate(x.shape)]
    return Tensor._wrap(_C.dropout(x._t, float(p), shape, mode == "upscale_in_train"))


# ---- resampling ----
def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=False,
                align_mode=0, data_format=None, name=None) -> Tensor:
    """Resizes the spatial dims with 'nearest', 'linear'/'bilinear'/'trilinear' (Paddle's
    `align_corners` and `align_mode`), 'bicubic' (Keys' cubic with a = -0.75, as Paddle and
    PyTorch; `align_corners` both ways) or 'area' (adaptive average pooling, 4-D)."""
    x = _t(x)
    mode = str(mode).lower()
    k = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise ValueError("[interpolate] give exactly one of size and scale_factor")

    def run(xc: Tensor) -> Tensor:
        spatial = xc.shape[2:]
        scales = None
        if size is not None:
            out = [int(size)] * k if isinstance(size, (int, np.integer)) \
                else [int(s) for s in (size.tolist() if isinstance(size, Tensor) else size)]
        else:
            sf = scale_factor.tolist() if isinstance(scale_factor, Tensor) else scale_factor
            scales = [float(sf)] * k if isinstance(sf, (int, float)) else [float(v) for v in sf]
            if len(scales) != k:
                raise ValueError(f"[interpolate] scale_factor {scale_factor!r} needs {k} values "
                                 f"for input {x.shape}")
            out = [int(np.floor(n * s)) for n, s in zip(spatial, scales)]
        if mode == "area":
            if k != 2:
                raise NotImplementedError("[interpolate] mode 'area' supports 4-D inputs only")
            from .functional import adaptive_avg_pool2d
            return adaptive_avg_pool2d(xc, out)
        return Tensor._wrap(_C.interpolate(xc._t, out, scales, mode, bool(align_corners),
                                           int(align_mode)))

    return _channel_first(run, x, data_format)


upsample = interpolate
