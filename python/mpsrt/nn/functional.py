"""`mpsrt.nn.functional`: activations, softmax, conv/pool (here) and the normalizations,
linear, conv1d, conv_transpose2d, pad, embedding, dropout and interpolate (`_layers.py`), under
Paddle's names and arguments.

>>> y = mpsrt.nn.functional.relu(mpsrt.to_tensor([-1.0, 2.0], place='mps'))
"""
from __future__ import annotations

from .. import _C
from .._ops import _t, clip as _clip
from .._tensor import Tensor


def _u(name, x):
    return Tensor._wrap(_C.unary(name, _t(x)._t))


def relu(x, name=None) -> Tensor:
    """max(x, 0)."""
    return _u("relu", x)


def relu6(x, name=None) -> Tensor:
    return _clip(x, 0.0, 6.0)


def sigmoid(x, name=None) -> Tensor:
    """1 / (1 + e^-x)."""
    return _u("sigmoid", x)


def tanh(x, name=None) -> Tensor:
    return _u("tanh", x)


def silu(x, name=None) -> Tensor:
    """x * sigmoid(x)."""
    return _u("silu", x)


swish = silu


def gelu(x, approximate=False, name=None) -> Tensor:
    """GELU; `approximate=True` or `'tanh'` uses the tanh formula."""
    tanh_ = approximate is True or approximate == "tanh"
    return Tensor._wrap(_C.gelu(_t(x)._t, tanh_))


def leaky_relu(x, negative_slope=0.01, name=None) -> Tensor:
    return Tensor._wrap(_C.leaky_relu(_t(x)._t, float(negative_slope)))


def elu(x, alpha=1.0, name=None) -> Tensor:
    return Tensor._wrap(_C.elu(_t(x)._t, float(alpha)))


def hardsigmoid(x, slope=1.0 / 6.0, offset=0.5, name=None) -> Tensor:
    """clip(slope * x + offset, 0, 1) (PyTorch's constants by default)."""
    return Tensor._wrap(_C.hardsigmoid(_t(x)._t, float(slope), float(offset)))


def hardswish(x, name=None) -> Tensor:
    return _u("hardswish", x)


def softplus(x, beta=1.0, threshold=20.0, name=None) -> Tensor:
    """log(1 + e^(beta x)) / beta, linear where beta x > threshold."""
    return Tensor._wrap(_C.softplus(_t(x)._t, float(beta), float(threshold)))


def hardtanh(x, min=-1.0, max=1.0, name=None) -> Tensor:
    return _clip(x, min, max)


def softmax(x, axis=-1, dtype=None, name=None, dim=None) -> Tensor:
    """Softmax along `axis` (PyTorch's `dim=` accepted)."""
    from .._ops import softmax as _softmax
    return _softmax(x, axis, dtype, dim=dim)


def log_softmax(x, axis=-1, dtype=None, name=None, dim=None) -> Tensor:
    from .._ops import log_softmax as _log_softmax
    return _log_softmax(x, axis, dtype, dim=dim)


def _pair(v):
    return [int(v), int(v)] if isinstance(v, (int,)) else [int(e) for e in v]


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCHW",
           name=None) -> Tensor:
    """2-D convolution, NCHW input and (out, in/groups, kh, kw) weight.
    `padding`: int, (ph, pw), Paddle's (top, bottom, left, right) or `'same'`/`'valid'`."""
    same = isinstance(padding, str)
    if same and padding.lower() != "same":
        if padding.lower() == "valid":
            same, padding = False, 0
        else:
            raise ValueError(f"[conv2d] padding must be 'same', 'valid' or ints, got {padding!r}")
    pads = [0, 0, 0, 0]
    if not same:
        pads = _pads2d(padding, "conv2d")
    b = None if bias is None else _t(bias)._t
    x = _t(x)
    nhwc = str(data_format).upper() == "NHWC"
    if not nhwc:
        _nchw(data_format, "conv2d")
    xc = x.permute([0, 3, 1, 2]) if nhwc else x
    y = Tensor._wrap(_C.conv2d(xc._t, _t(weight)._t, b, _pair(stride), pads, same,
                               _pair(dilation), int(groups)))
    return y.permute([0, 2, 3, 1]) if nhwc else y


def max_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, return_mask=False,
               data_format="NCHW", name=None, dilation=1) -> Tensor:
    """Max pooling over NCHW windows (stride defaults to the kernel size); Paddle's argument
    order, plus PyTorch's `dilation` as a keyword. `return_mask=True` also returns, per output,
    the int32 flat index `h * W + w` of its maximum in the input plane (first on ties)."""
    _nchw(data_format, "max_pool2d")
    st = None if stride is None else _pair(stride)
    if return_mask:
        y, m = _C.max_pool2d_mask(_t(x)._t, _pair(kernel_size), st, _pair(padding),
                                  _pair(dilation), bool(ceil_mode))
        return Tensor._wrap(y), Tensor._wrap(m)
    return Tensor._wrap(_C.pool2d("max", _t(x)._t, _pair(kernel_size), st, _pair(padding),
                                  _pair(dilation), bool(ceil_mode), True))


def _one(v, op) -> int:
    v = v if isinstance(v, int) else list(v)
    if isinstance(v, list):
        if len(v) != 1:
            raise ValueError(f"[{op}] expected one value for the 1-D length, got {v!r}")
        v = v[0]
    return int(v)


def max_pool1d(x, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False,
               name=None):
    """Max pooling over the last dim of an NCL (or CL) tensor, Paddle's signature; with
    `return_mask=True` also the int32 index along L of each maximum."""
    x = _t(x)
    if x.ndim not in (2, 3):
        raise ValueError(f"[max_pool1d] expected a 2-D (C, L) or 3-D (N, C, L) input, "
                         f"got shape {x.shape}")
    x4 = x.unsqueeze(-2)
    k = [1, _one(kernel_size, "max_pool1d")]
    st = None if stride is None else [1, _one(stride, "max_pool1d")]
    pad = [0, _one(padding, "max_pool1d")]
    if return_mask:
        y, m = _C.max_pool2d_mask(x4._t, k, st, pad, [1, 1], bool(ceil_mode))
        return Tensor._wrap(y).squeeze(-2), Tensor._wrap(m).squeeze(-2)
    y = Tensor._wrap(_C.pool2d("max", x4._t, k, st, pad, [1, 1], bool(ceil_mode), True))
    return y.squeeze(-2)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True,
               divisor_override=None, data_format="NCHW", name=None,
               count_include_pad=None) -> Tensor:
    """Average pooling over NCHW windows. Paddle's `exclusive=True` (the default) leaves the
    padding out of the divisor; PyTorch's `count_include_pad` keyword overrides it."""
    if divisor_override is not None:
        raise NotImplementedError("[avg_pool2d] divisor_override is not supported")
    _nchw(data_format, "avg_pool2d")
    include = (not exclusive) if count_include_pad is None else bool(count_include_pad)
    return Tensor._wrap(_C.pool2d("avg", _t(x)._t, _pair(kernel_size),
                                  None if stride is None else _pair(stride), _pair(padding),
                                  [1, 1], bool(ceil_mode), include))


def _nchw(data_format, op):
    if str(data_format).upper() != "NCHW":
        raise NotImplementedError(f"[{op}] data_format={data_format!r}: only 'NCHW' is "
                                  f"supported (permute channels-last input first)")


def adaptive_avg_pool2d(x, output_size, name=None) -> Tensor:
    """Average over adaptive windows; output size 1 runs the global pooling kernel."""
    if _pair(output_size) == [1, 1]:
        return Tensor._wrap(_C.global_pool2d("avg", _t(x)._t))
    return Tensor._wrap(_C.adaptive_pool2d("avg", _t(x)._t, _pair(output_size)))


def adaptive_max_pool2d(x, output_size, return_mask=False, name=None) -> Tensor:
    """Max over adaptive windows; output size 1 runs the global pooling kernel. With
    `return_mask=True` also the int32 flat index `h * W + w` of each maximum."""
    if return_mask:
        y, m = _C.max_pool2d_mask(_t(x)._t, [1, 1], None, [0, 0], [1, 1], False,
                                  _pair(output_size))
        return Tensor._wrap(y), Tensor._wrap(m)
    if _pair(output_size) == [1, 1]:
        return Tensor._wrap(_C.global_pool2d("max", _t(x)._t))
    return Tensor._wrap(_C.adaptive_pool2d("max", _t(x)._t, _pair(output_size)))


def _pads2d(padding, op) -> list:
    """Paddle's 2-D padding (int, [ph, pw] or [top, bottom, left, right]) as the library's
    (top, left, bottom, right)."""
    p = [int(padding)] * 2 if isinstance(padding, int) else [int(v) for v in padding]
    if len(p) == 2:
        return p + p
    if len(p) == 4:
        return [p[0], p[2], p[1], p[3]]
    raise ValueError(f"[{op}] padding must be an int, [ph, pw] or [top, bottom, left, right], "
                     f"got {padding!r}")


from ._layers import *  # noqa: E402,F401,F403 - norms, linear, conv1d/transpose, pad, ...
