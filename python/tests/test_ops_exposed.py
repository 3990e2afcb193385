"""The Python package exposes the whole operator library of `mpsrt-tensor`.

1. `test_every_rust_op_has_a_python_entry` reads the crate's public functions from its source
   (`lib.rs`'s `pub use` list; glob re-exports are expanded from the module's `pub fn`s and its
   `macro_rules!` op tables) and fails when one has no Python entry, or when this file maps a
   name the crate no longer has.
2. `test__C_stub_is_complete`: `_C.pyi` declares exactly what `mpsrt._C` exports.
3. A table of correctness cases, each against NumPy, on both places (GPU = lavapipe in CI).
"""
import ast
import importlib
import re
from pathlib import Path

import numpy as np
import pytest

import mpsrt
import mpsrt.nn.functional as F
from conftest import assert_close

ROOT = Path(__file__).resolve().parents[2]
CRATE = ROOT / "crates" / "mpsrt-tensor" / "src"

# Rust public functions that are not user-facing ops, each with why.
NOT_OPS = {
    "on_cpu_workers": "a threading utility (runs a closure on the CPU worker pool), not an op",
    "fused_elementwise": "takes the kernel IR `Expr` (the graph compiler's fusion entry); "
                         "Python writes custom kernels with `mpsrt.jit`",
    "conv2d_act": "conv2d + activation fused for the graph engine; equals F.conv2d then F.relu/...",
    "conv2d_fused": "conv2d + residual + activation fused for the graph engine; equals the "
                    "separate exposed ops",
    "gemm_act": "gemm + activation fused for the graph engine; equals mpsrt.addmm then F.relu/...",
    "matmul_seq_major": "matmul whose result is stored [B, M, H, N] for the graph engine's "
                        "attention (values equal mpsrt.matmul; only the memory layout differs)",
    "matmul_kernel_name": "a diagnostic (which GEMM kernel a device would run), not an op",
    "plan_f16_gemm": "the pure kernel planner behind f16 matmul (tested in Rust), not an op",
    "plan_gemm": "the pure tile/split-K planner behind f32 matmul (tested in Rust), not an op",
    "plan_gemm_tuned": "the pure tile/split-K planner of the tiled GEMM's generation 2 (tested "
                       "in Rust), not an op",
    "set_gemm_override": "a benchmark hook (forces one tiled-GEMM tune per process for in-process "
                         "A/B timing), not an op",
    "plan_f16_conv": "the pure route planner behind f16 convs on the matrix units (tested in Rust)",
    "plan_coop_splitk": "the pure split-K planner behind the f16 matrix-unit GEMM (tested in Rust)",
    "conv_coop_launches": "a diagnostic counter (how many convs took the matrix-unit route)",
    "conv_coop_direct_launches": "a diagnostic counter (how many of those took the direct 1x1 "
                                 "kernel, opt-in MPSRT_COOP_CONV_DIRECT=1)",
    "matmul_fused": "matmul + bias + residual + activation fused for the graph engine (a linear "
                    "layer's GEMM epilogue); equals mpsrt.matmul, + bias, + residual, then "
                    "F.gelu/F.relu/...",
    "masked_softmax": "attention's scale + mask + softmax in one pass for the graph engine's "
                      "Attention; equals F.softmax(x * scale + mask) with fully masked rows zeroed",
    "sdpa_on_matrix_units": "a pure routing query (would f16 attention run on the matrix units; "
                            "the engine composes it otherwise; tested in Rust), not an op",
    "small_m_prefers_tiled": "a pure routing query (does a small-M f16 GEMM take the tiled "
                             "split-K instead of the matrix units; tested in Rust), not an op",
    "conv1x1_vec": "a 1x1 conv on a 1x1 map as one GEMV dispatch for the graph engine; equals "
                   "F.conv2d on that shape",
    "depthwise_conv_pool": "a depthwise conv and the global average pool of its output in one "
                           "dispatch for the graph engine; equals F.conv2d(groups=C) then "
                           "F.adaptive_avg_pool2d(1)",
    "with_destination": "runs a closure whose last elementwise launch writes into a given "
                        "tensor's memory (the Paddle plugin's output buffers), not an op",
    "sdpa_fusable": "a planner query (does the fused attention kernel take these head sizes)",
    "with_conv_destination": "runs a closure whose conv stores into a channel slice of a given "
                             "tensor (the engine's concat written in place), not an op",
    "with_conv_input_scale": "runs a closure whose conv reads its input scaled by a gate (the "
                             "engine's folded squeeze-excitation Mul), not an op",
    "with_conv_input_affine_relu": "runs a closure whose conv reads relu(x * scale + shift) "
                                   "(the engine's folded BatchNorm + Relu), not an op",
    "input_scale_pending": "a query for with_conv_input_scale (was the gate taken), not an op",
    "write_into": "copies into existing storage other tensors share (the engine's concat "
                  "groups); Python tensors are values, so not an op",
    "se_gate": "squeeze-excitation's two 1x1 convs fused for the graph engine; equals "
               "F.conv2d + activation twice",
    "scaled_dot_product_attention": "the fused attention kernel behind the engine's ONNX "
                                    "Attention (tested in Rust); no Python binding yet",
}
# Rust name -> Python entry, where it is not `mpsrt.<name>` or `mpsrt.nn.functional.<name>`.
ENTRY = {
    "where_": "mpsrt.where",
    "where_scalar": "mpsrt.where",  # where(cond, 1.0, 0.0)
    "split_into": "mpsrt.split",  # split(x, 3)
    "batch_norm_train": "mpsrt.nn.functional.batch_norm",  # training=True
    "gemm": "mpsrt.addmm",
    "global_avg_pool2d": "mpsrt.nn.functional.adaptive_avg_pool2d",  # output_size=1
    "global_max_pool2d": "mpsrt.nn.functional.adaptive_max_pool2d",  # output_size=1
    "max_pool2d_with_indices": "mpsrt.nn.functional.max_pool2d",  # return_mask=True
    "adaptive_max_pool2d_with_indices": "mpsrt.nn.functional.adaptive_max_pool2d",  # return_mask
}


def _strip_strings(src: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', re.sub(r"//[^\n]*", "", src))


def _module_fns(path: Path) -> set:
    """`pub fn`s of a module, including those its `macro_rules!` op tables generate."""
    src = _strip_strings(path.read_text())
    names = set(re.findall(r"^pub fn (\w+)", src, re.M))
    for m in re.finditer(r"macro_rules!\s+(\w+)\s*\{(.*?)=>(.*?)\n\}", src, re.S):
        name, pattern, body = m.groups()
        metavars = re.findall(r"\$(\w+):\w+", pattern)
        fn_pos = [metavars.index(v) for v in re.findall(r"pub fn \$(\w+)", body)]
        for inv in re.finditer(rf"^{name}!\s*\{{(.*?)\}}", src, re.M | re.S):
            for row in inv.group(1).split(";"):
                fields = [f.strip() for f in row.split(",")]
                if len(fields) >= len(metavars):
                    names.update(fields[i] for i in fn_pos)
    return names


def rust_public_fns() -> set:
    src = _strip_strings((CRATE / "lib.rs").read_text())
    names = set()
    for mod, items in re.findall(r"pub use\s+([\w:]+)::(\{[^}]*\}|\*|\w+)\s*;", src):
        if items == "*":
            names |= _module_fns(CRATE / f"{mod}.rs")
        else:
            names |= {i.strip() for i in items.strip("{}").split(",") if i.strip()}
    return {n for n in names if n[0].islower()}  # functions; CamelCase items are types


def _resolve(path: str):
    mod, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(mod), attr, None)


def python_entry(name: str):
    if name in ENTRY:
        return ENTRY[name]
    base = re.sub(r"^r?(\w+?)_scalar$", r"\1", name)  # add_scalar / radd_scalar -> add
    for path in (f"mpsrt.{base}", f"mpsrt.nn.functional.{base}"):
        if callable(_resolve(path)):
            return path
    return None


@pytest.mark.skipif(not (CRATE / "lib.rs").exists(), reason="needs the source checkout")
def test_every_rust_op_has_a_python_entry():
    ops = rust_public_fns()
    assert {"add", "radd_scalar", "exp", "concat", "batch_norm", "conv_transpose2d"} <= ops, \
        "the parser lost track of lib.rs"
    missing = sorted(n for n in ops - set(NOT_OPS) if python_entry(n) is None)
    assert not missing, f"Rust ops with no Python entry: {missing}"
    for n in ops - set(NOT_OPS):
        assert callable(_resolve(python_entry(n))), (n, python_entry(n))
    stale = sorted((set(NOT_OPS) | set(ENTRY)) - ops)
    assert not stale, f"names mapped here that mpsrt-tensor no longer exports: {stale}"
    # Scalar forms are reached through the `_C.binary_scalar` table: every one must be there.
    unary, binary = mpsrt._C.op_names()
    for n in ops:
        if n.endswith("_scalar") and n != "where_scalar":
            assert re.sub(r"^r?(\w+?)_scalar$", r"\1", n) in binary, n


def test__C_stub_is_complete():
    tree = ast.parse((ROOT / "python" / "mpsrt" / "_C.pyi").read_text())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    exported = {n for n in dir(mpsrt._C) if not n.startswith("_")}
    assert exported - declared == set(), f"in _C but not in _C.pyi: {sorted(exported - declared)}"
    assert declared - exported == set(), f"in _C.pyi but not in _C: {sorted(declared - exported)}"


# ---- NumPy references ----
rng = np.random.default_rng(7)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv1d_ref(x, w, b, stride, pad, dil, groups):
    x = np.pad(x, ((0, 0), (0, 0), pad))
    n, c, L = x.shape
    o, cg, k = w.shape
    ol = (L - dil * (k - 1) - 1) // stride + 1
    og = o // groups
    out = np.zeros((n, o, ol))
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(ol):
            patch = xs[:, :, i * stride:i * stride + dil * (k - 1) + 1:dil]
            out[:, g * og:(g + 1) * og, i] = np.einsum("nck,ock->no", patch,
                                                       w[g * og:(g + 1) * og])
    return out + (0 if b is None else b[None, :, None])


def conv_t_ref(x, w, b, stride, pads, opad, dil, groups):
    """Scatter form of a transposed conv; pads = (top, bottom, left, right)."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    fh = (h - 1) * stride + dil * (kh - 1) + 1 + opad
    fw = (wd - 1) * stride + dil * (kw - 1) + 1 + opad
    full = np.zeros((n, og * groups, fh, fw))
    cg = c // groups
    for g in range(groups):
        xg = x[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", xg, w[g * cg:(g + 1) * cg, :, i, j])
                full[:, g * og:(g + 1) * og, i * dil:i * dil + (h - 1) * stride + 1:stride,
                     j * dil:j * dil + (wd - 1) * stride + 1:stride] += contrib
    t, bo, le, r = pads
    out = full[:, :, t:fh - bo, le:fw - r]
    return out + (0 if b is None else b[None, :, None, None])


def norm_ref(x, axes, eps=1e-5):
    m = x.mean(axis=axes, keepdims=True)
    v = x.var(axis=axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps)


def lerp_axis_ref(a, axis, out, align_corners, align_mode, scale=None):
    """Paddle's linear resampling along one axis, written directly from its documented rule."""
    n = a.shape[axis]
    if align_corners:
        ratio = (n - 1) / (out - 1) if out > 1 else 0.0
        src = np.arange(out) * ratio
    else:
        ratio = 1 / scale if scale else n / out
        src = np.arange(out) * ratio if align_mode == 1 else \
            np.maximum((np.arange(out) + 0.5) * ratio - 0.5, 0)
    i0 = np.minimum(np.floor(src).astype(int), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    lam = np.clip(src - i0, 0, 1)
    shape = [1] * a.ndim
    shape[axis] = out
    lam = lam.reshape(shape)
    return np.take(a, i0, axis) * (1 - lam) + np.take(a, i1, axis) * lam


# ---- cases: name -> fn(t) returning [(got, expected[, tol])], t = to_tensor on the place ----
A, B = _f32(2, 3, 4), _f32(2, 2, 4)
I32 = rng.integers(-5, 5, (2, 1, 4)).astype(np.int32)
X4 = _f32(2, 4, 5, 6)
C4 = _f32(4)
V4 = np.abs(_f32(4)) + 0.5
TOL = dict(rtol=1e-4, atol=1e-4)


def _split_cases(t):
    x = np.arange(24, dtype=np.float32).reshape(2, 12)
    got = mpsrt.split(t(x), 3, axis=1)
    got2 = mpsrt.split(t(x), [2, -1, 5], axis=-1)
    exp2 = np.split(x, [2, 7], axis=1)
    return [(g, e) for g, e in zip(got, np.split(x, 3, axis=1))] + \
        [(g, e) for g, e in zip(got2, exp2)] + \
        [(g, e) for g, e in zip(mpsrt.chunk(t(x), 2, axis=0), np.split(x, 2, axis=0))]


def _bn_train(t):
    x = _f32(3, 4, 2, 2)
    rm, rv = t(np.zeros(4, np.float32)), t(np.ones(4, np.float32))
    w, b = _f32(4), _f32(4)
    y = F.batch_norm(t(x), rm, rv, t(w), t(b), training=True, momentum=0.8)
    axes = (0, 2, 3)
    ref = norm_ref(x, axes) * w[None, :, None, None] + b[None, :, None, None]
    return [(y, ref, TOL), (rm, 0.2 * x.mean(axis=axes), TOL),
            (rv, 0.8 + 0.2 * x.var(axis=axes), TOL)]


def _dropout(t):
    x = np.abs(_f32(64, 64)) + 1.0
    y = F.dropout(t(x), p=0.25).numpy()
    kept = y != 0
    frac = 1 - kept.mean()
    assert 0.2 < frac < 0.3, frac  # 4096 draws: 0.25 +- 0.05 is > 10 sigma
    ya = F.dropout(t(x), p=0.5, axis=1).numpy()  # one draw per column
    assert ((ya == 0).all(axis=0) | (ya != 0).all(axis=0)).all()
    return [(y[kept], x[kept] / 0.75, TOL),
            (F.dropout(t(x), p=0.3, training=False), x),
            (F.dropout(t(x), p=0.3, training=False, mode="downscale_in_infer"), x * 0.7, TOL),
            (F.dropout(t(x), p=1.0), np.zeros_like(x)),
            (F.dropout(t(x), p=0.0), x)]


def _interp(t):
    a = np.array([[1.0, 2.0], [4.0, 5.0]], np.float32).reshape(1, 1, 2, 2)
    x = _f32(2, 3, 4, 5)
    x3, x5 = _f32(2, 3, 7), _f32(1, 2, 3, 4, 2)
    # PyTorch's documented values for a 2x2 -> 4x4 bilinear resize (equal to Paddle's
    # align_mode=0), an anchor independent of lerp_axis_ref.
    torch_false = [[1.0, 1.25, 1.75, 2.0], [1.75, 2.0, 2.5, 2.75], [3.25, 3.5, 4.0, 4.25],
                   [4.0, 4.25, 4.75, 5.0]]
    torch_true = [[1.0, 4 / 3, 5 / 3, 2.0], [2.0, 7 / 3, 8 / 3, 3.0], [3.0, 10 / 3, 11 / 3, 4.0],
                  [4.0, 13 / 3, 14 / 3, 5.0]]

    def bil(x, size, ac, am):
        return lerp_axis_ref(lerp_axis_ref(x, 2, size[0], ac, am), 3, size[1], ac, am)

    return [
        (F.interpolate(t(a), scale_factor=2, mode="bilinear"), np.array(torch_false)[None, None]),
        (F.interpolate(t(a), size=[4, 4], mode="bilinear", align_corners=True),
         np.array(torch_true)[None, None], TOL),
        (F.interpolate(t(x), size=[7, 3], mode="bilinear"), bil(x, [7, 3], False, 0), TOL),
        (F.interpolate(t(x), size=[6, 9], mode="bilinear", align_mode=1),
         bil(x, [6, 9], False, 1), TOL),
        (F.interpolate(t(x), scale_factor=2, mode="nearest"), x.repeat(2, 2).repeat(2, 3)),
        (F.interpolate(t(x), size=[2, 3], mode="nearest"),
         x[:, :, np.floor(np.arange(2) * 2).astype(int)][:, :, :, [0, 1, 3]]),
        # Paddle's nearest with align_corners rounds (in-1)/(out-1) * i half up.
        (F.interpolate(t(x3[:, :, :4]), size=7, mode="nearest", align_corners=True),
         x3[:, :, [0, 1, 1, 2, 2, 3, 3]]),
        (F.interpolate(t(x3), size=11, mode="linear"),
         lerp_axis_ref(x3, 2, 11, False, 0), TOL),
        (F.interpolate(t(x5), size=[5, 2, 3], mode="trilinear", align_corners=True),
         lerp_axis_ref(lerp_axis_ref(lerp_axis_ref(x5, 2, 5, True, 0), 3, 2, True, 0), 4, 3,
                       True, 0), TOL),
        (F.interpolate(t(X4[:, :, :4, :6]), size=[2, 3], mode="area"),
         X4[:, :, :4, :6].reshape(2, 4, 2, 2, 3, 2).mean(axis=(3, 5)), TOL),
        (F.interpolate(t(x.transpose(0, 2, 3, 1)), size=[7, 3], mode="bilinear",
                       data_format="NHWC"), bil(x, [7, 3], False, 0).transpose(0, 2, 3, 1), TOL),
    ]


CASES = {
    "concat": lambda t: [(mpsrt.concat([t(A), t(B)], axis=1), np.concatenate([A, B], 1)),
                         (mpsrt.concat([t(A[:, :1]), t(I32)], axis=-2),
                          np.concatenate([A[:, :1], I32], 1))],
    "stack": lambda t: [(mpsrt.stack([t(A), t(A * 2)], axis=-1), np.stack([A, A * 2], -1)),
                        (mpsrt.stack([t(A)], axis=0), A[None])],
    "split": _split_cases,
    "gather": lambda t: [
        (mpsrt.gather(t(A), t(np.array([[2, 0], [-1, 1]], np.int32)), axis=1),
         np.take(A, [[2, 0], [2, 1]], axis=1)),
        (mpsrt.gather(t(A), [1, 0]), A[[1, 0]])],
    "index_select": lambda t: [(mpsrt.index_select(t(A), [3, 3, 0], axis=-1), A[..., [3, 3, 0]])],
    "tile": lambda t: [(mpsrt.tile(t(A), [2, 1, 1, 3]), np.tile(A, (2, 1, 1, 3))),
                       (mpsrt.tile(t(I32), 2), np.tile(I32, 2))],
    "pad": lambda t: [
        (F.pad(t(A), [1, 0, 0, 2, 1, 1]), np.pad(A, ((1, 0), (0, 2), (1, 1)))),
        (F.pad(t(A), [1, 0, 0, 2, 1, 1], pad_from_left_axis=False, value=-1.0),
         np.pad(A, ((1, 1), (0, 2), (1, 0)), constant_values=-1)),
        (F.pad(t(X4), [1, 2, 2, 0], mode="reflect"),
         np.pad(X4, ((0, 0), (0, 0), (2, 0), (1, 2)), mode="reflect")),
        (F.pad(t(X4), [1, 2, 2, 0], mode="replicate"),
         np.pad(X4, ((0, 0), (0, 0), (2, 0), (1, 2)), mode="edge")),
        (F.pad(t(X4), [3, 1, 0, 5], mode="circular"),
         np.pad(X4, ((0, 0), (0, 0), (0, 5), (3, 1)), mode="wrap")),
        (F.pad(t(X4), [1, 2, 2, 0], mode="reflect", data_format="NHWC"),
         np.pad(X4, ((0, 0), (2, 0), (1, 2), (0, 0)), mode="reflect")),
        (F.pad(t(A), [-1, 1]), np.pad(A[..., 1:], ((0, 0), (0, 0), (0, 1))))],
    "batch_norm": lambda t: [
        (F.batch_norm(t(X4), t(C4), t(V4), t(C4 * 2), t(C4 + 1), epsilon=1e-3),
         (X4 - C4[:, None, None]) / np.sqrt(V4[:, None, None] + 1e-3) * (C4 * 2)[:, None, None]
         + (C4 + 1)[:, None, None], TOL),
        (F.batch_norm(t(X4.transpose(0, 2, 3, 1)), t(C4), t(V4), data_format="NHWC"),
         (X4.transpose(0, 2, 3, 1) - C4) / np.sqrt(V4 + 1e-5), TOL)],
    "batch_norm_train": _bn_train,
    "layer_norm": lambda t: [
        (F.layer_norm(t(X4), [5, 6], t(_f32(5, 6) * 0 + 2), t(np.ones((5, 6), np.float32))),
         norm_ref(X4, (2, 3)) * 2 + 1, TOL),
        (F.layer_norm(t(A), 4), norm_ref(A, (2,)), TOL)],
    "group_norm": lambda t: [(F.group_norm(t(X4), 2, weight=t(C4), bias=t(V4)),
                              norm_ref(X4.reshape(2, 2, -1), (2,)).reshape(X4.shape)
                              * C4[:, None, None] + V4[:, None, None], TOL)],
    "instance_norm": lambda t: [
        (F.instance_norm(t(X4), weight=t(C4), bias=t(V4)),
         norm_ref(X4, (2, 3)) * C4[:, None, None] + V4[:, None, None], TOL),
        (F.instance_norm(t(X4), t(C4), t(V4), use_input_stats=False),
         (X4 - C4[:, None, None]) / np.sqrt(V4[:, None, None] + 1e-5), TOL)],
    "linear": lambda t: [(F.linear(t(A), t(LW), t(BIAS3)), A @ LW + BIAS3, TOL)],
    "conv1d": lambda t: [
        (F.conv1d(t(X1), t(W1), t(C4[:4]), stride=2, padding=[1, 2], dilation=2, groups=2),
         conv1d_ref(X1, W1, C4[:4], 2, (1, 2), 2, 2), TOL),
        (F.conv1d(t(X1), t(W1[:, :, :3]), groups=2, padding="same"),
         conv1d_ref(X1, W1[:, :, :3], None, 1, (1, 1), 1, 2), TOL),
        (F.conv1d(t(X1.transpose(0, 2, 1)), t(W1), groups=2, data_format="NLC"),
         conv1d_ref(X1, W1, None, 1, (0, 0), 1, 2).transpose(0, 2, 1), TOL)],
    "conv_transpose2d": lambda t: [
        (F.conv_transpose2d(t(XT), t(WT), t(BIAS3), stride=2, padding=1, output_padding=1),
         conv_t_ref(XT, WT, BIAS3, 2, (1, 1, 1, 1), 1, 1, 1), TOL),
        (F.conv_transpose2d(t(XT), t(WG), stride=2, padding=[0, 1, 2, 0], dilation=2,
                            groups=2),
         conv_t_ref(XT, WG, None, 2, (0, 1, 2, 0), 0, 2, 2), TOL),
        (F.conv_transpose2d(t(XT), t(WT), stride=3, output_size=[16, 18]),
         conv_t_ref(XT, WT, None, 3, (0, 0, 0, 0), 1, 1, 1), TOL)],
    "conv2d_paddle_pads": lambda t: [
        (F.conv2d(t(X4), t(_W2), padding=[1, 0, 2, 1]),
         _conv2d_pad_ref(X4, _W2, (1, 0, 2, 1)), TOL)],
    "embedding": lambda t: [
        (F.embedding(t(np.array([[0, 3], [2, 3]], np.int32)), t(EMB), padding_idx=-1),
         np.where(np.array([[0, 3], [2, 3]])[..., None] == 3, 0, EMB[[[0, 3], [2, 3]]])),
        (F.embedding([1, 1, 0], t(EMB)), EMB[[1, 1, 0]])],
    "dropout": _dropout,
    "interpolate": _interp,
    "global_pools": lambda t: [(F.adaptive_avg_pool2d(t(X4), 1), X4.mean(axis=(2, 3),
                                                                          keepdims=True), TOL),
                               (F.adaptive_max_pool2d(t(X4), [1, 1]),
                                X4.max(axis=(2, 3), keepdims=True))],
}
X1, W1 = _f32(2, 4, 11), _f32(4, 2, 4)
XT, WT, WG = _f32(2, 4, 5, 6), _f32(4, 3, 3, 2), _f32(4, 2, 2, 3)
_W2 = _f32(3, 4, 3, 3)
EMB = _f32(4, 5)
ADDMM = (_f32(3, 5), np.ones((5, 4), np.float32))


def _conv2d_pad_ref(x, w, pads):
    t, b, left, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)))
    oh, ow = xp.shape[2] - w.shape[2] + 1, xp.shape[3] - w.shape[3] + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + 3, j:j + 3], w)
    return out


CASES["addmm"] = lambda t: [(mpsrt.addmm(t(C4), t(ADDMM[0]), t(ADDMM[1]), beta=0.5, alpha=2.0),
                             0.5 * C4 + 2.0 * ADDMM[0] @ ADDMM[1], TOL)]
LW = np.arange(12, dtype=np.float32).reshape(4, 3)
BIAS3 = np.array([1, 2, 3], np.float32)


def _views_and_dtypes(t):
    """Non-contiguous operands, zero-size parts, and the non-f32 dtypes each op keeps."""
    h = rng.standard_normal((2, 3, 4, 6)).astype(np.float16)
    i = rng.integers(-9, 9, (3, 5)).astype(np.int32)
    xt = t(A).transpose([0, 2, 1])  # [2, 4, 3], a strided view
    return [
        (mpsrt.concat([xt, t(np.zeros((2, 0, 3), np.float32)), xt], axis=1),
         np.concatenate([A.transpose(0, 2, 1)] * 2, 1)),
        (mpsrt.stack([xt, xt], axis=1), np.stack([A.transpose(0, 2, 1)] * 2, 1)),
        (mpsrt.tile(xt, [1, 2, 1]), np.tile(A.transpose(0, 2, 1), (1, 2, 1))),
        (mpsrt.index_select(t(i).T, [4, 0], axis=0), i.T[[4, 0]]),
        (F.pad(t(i), [1, 1, 0, 2], value=7), np.pad(i, ((1, 1), (0, 2)), constant_values=7)),
        (F.pad(t(h), [1, 1, 1, 1], mode="circular"),
         np.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="wrap")),
        (F.interpolate(t(h), scale_factor=2, mode="nearest"), h.repeat(2, 2).repeat(2, 3)),
        (F.interpolate(t(h), size=[3, 5], mode="bilinear").astype("float32"),
         lerp_axis_ref(lerp_axis_ref(h.astype(np.float64), 2, 3, False, 0), 3, 5, False, 0),
         dict(rtol=1e-2, atol=1e-2)),
        (F.layer_norm(t(h), 6).astype("float32"), norm_ref(h.astype(np.float64), (3,)),
         dict(rtol=1e-2, atol=1e-2)),
        (F.embedding(t(np.array([2, 0], np.int32)), t(i)), i[[2, 0]]),
        # the method forms and PyTorch's `cat`
        (t(A).tile([1, 2]), np.tile(A, (1, 1, 2))),
        (t(A).split([1, 3], axis=2)[1], A[..., 1:]),
        (t(A).index_select([2, 1], axis=1), A[:, [2, 1]]),
        (mpsrt.cat([t(A), t(A)], 0), np.concatenate([A, A])),
    ]


CASES["views_and_dtypes"] = _views_and_dtypes


def _paddle_signatures(t):
    """Paddle's positional orders and defaults where they differ from PyTorch's."""
    x = _f32(2, 3, 5, 5)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=np.nan)
    win = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    ceil = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1)), constant_values=-np.inf)
    nhwc = x.transpose(0, 2, 3, 1)
    return [
        (mpsrt.sum(t(A), 1, None, True), A.sum(1, keepdims=True), TOL),  # (axis, dtype, keepdim)
        (mpsrt.norm(t(A), 1, axis=2), np.abs(A).sum(2), TOL),
        (mpsrt.norm(t(A), float("inf")), np.abs(A).max(), TOL),
        (mpsrt.norm(t(A), 3, axis=[0, 1]), (np.abs(A) ** 3).sum((0, 1)) ** (1 / 3), TOL),
        (mpsrt.norm(t(A), 2), np.sqrt((A.astype(np.float64) ** 2).sum()), TOL),
        # exclusive=True by default: the padding is not counted.
        (F.avg_pool2d(t(x), 3, 1, 1), np.nanmean(win, axis=(-2, -1)), TOL),
        (F.avg_pool2d(t(x), 3, 1, 1, exclusive=False), np.nansum(win, axis=(-2, -1)) / 9, TOL),
        (F.max_pool2d(t(x), 2, 2, 0, True),  # ceil_mode is the 5th positional argument
         ceil.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5))),
        (F.conv2d(t(nhwc), t(_W2[:, :3]), padding=1, data_format="NHWC"),
         _conv2d_pad_ref(x, _W2[:, :3], (1, 1, 1, 1)).transpose(0, 2, 3, 1), TOL),
    ]


CASES["paddle_signatures"] = _paddle_signatures


def test_result_dtypes(place):
    h = mpsrt.to_tensor(np.ones((2, 3, 4, 4), np.float16), place=place)
    i = mpsrt.to_tensor(np.ones((2, 3), np.int32), place=place)
    assert F.interpolate(h, size=[2, 2], mode="bilinear").dtype == "float16"
    assert F.layer_norm(h, 4).dtype == "float16"
    assert F.pad(i, [1, 1]).dtype == "int32"
    assert mpsrt.concat([i, i]).dtype == "int32"
    assert all(p.dtype == "int32" for p in mpsrt.split(i, 3, axis=1))
    assert mpsrt.split(mpsrt.zeros([0, 4], place=place), 2, axis=1)[0].shape == [0, 2]


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_vs_numpy(place, name):
    def t(a):
        return mpsrt.to_tensor(a, place=place)

    results = CASES[name](t)
    assert results
    for r in results:
        got, expected = r[0], r[1]
        if isinstance(got, mpsrt.Tensor):
            assert got.place.split(":")[0] == ("cpu" if place == "cpu" else "mps")
        assert_close(got, expected, **(r[2] if len(r) > 2 else {}))


def test_errors_name_the_op(place):
    x = mpsrt.to_tensor(A, place=place)
    with pytest.raises(ValueError, match=r"\[concat\]"):
        mpsrt.concat([x, mpsrt.to_tensor(_f32(2, 3, 5), place=place)], axis=1)
    with pytest.raises(ValueError, match=r"\[concat\].*none"):
        mpsrt.concat([], axis=0)
    with pytest.raises(ValueError, match=r"\[split\]"):
        mpsrt.split(x, 2, axis=1)
    with pytest.raises(ValueError, match=r"\[gather\]"):
        mpsrt.gather(x, [7], axis=0)
    with pytest.raises(ValueError, match=r"\[pad\]"):
        F.pad(mpsrt.ones([2, 3], place=place), [1, 1], mode="reflect")
    with pytest.raises(ValueError, match=r"\[pad\]"):
        F.pad(mpsrt.to_tensor(X4, place=place), [6, 0, 0, 0], mode="reflect")
    with pytest.raises(ValueError, match=r"\[linear\].*in_features"):
        F.linear(x, mpsrt.ones([3, 4], place=place))
    with pytest.raises(ValueError, match=r"\[batch_norm\]"):
        F.batch_norm(x, mpsrt.zeros([2], place=place), mpsrt.ones([2], place=place))
    with pytest.raises(ValueError, match=r"\[group_norm\]"):
        F.group_norm(mpsrt.to_tensor(X4, place=place), 3)
    with pytest.raises(ValueError, match=r"\[interpolate\].*exceeds"):
        F.interpolate(mpsrt.to_tensor(X4, place=place), scale_factor=1e8)
    with pytest.raises(NotImplementedError, match=r"\[interpolate\]"):
        F.interpolate(mpsrt.to_tensor(X4, place=place), size=[3, 3], mode="lanczos")
    with pytest.raises(ValueError, match=r"\[conv_transpose2d\]"):
        F.conv_transpose2d(mpsrt.to_tensor(XT, place=place),
                           mpsrt.to_tensor(WT, place=place), output_size=[40, 40])
