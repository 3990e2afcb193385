//! One small kernel per language feature; each must compile, validate with naga and translate
//! to MSL. Cases are data: (name, kernel body, output dtype, BLOCK).

mod common;

use common::*;
use mpsrt_core::DType::{self, Bool, F16, F32, I32, I8, U8};

const HEADER: &str = "import mpsrt
import mpsrt.language as tl


@mpsrt.jit
def helper_scale(x, factor: tl.constexpr = 2.0):
    return x * factor


@mpsrt.jit
def kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
";

/// (name, body lines, dtype of out_ptr, BLOCK)
const CASES: &[(&str, &str, DType, i64)] = &[
    ("load_store_masked", "x = tl.load(x_ptr + offs, mask=mask)\ntl.store(out_ptr + offs, x, mask=mask)", F32, 128),
    ("load_other", "x = tl.load(x_ptr + offs, mask=mask, other=1.5)\ntl.store(out_ptr + offs, x, mask=mask)", F32, 128),
    ("load_other_block", "x = tl.load(x_ptr + offs, mask=mask, other=offs.to(tl.float32))\ntl.store(out_ptr + offs, x)", F32, 128),
    ("unmasked", "tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1)", F32, 64),
    ("scalar_load", "s = tl.load(x_ptr)\ntl.store(out_ptr + offs, s + offs, mask=mask)", F32, 128),
    ("scalar_store_sum", "x = tl.load(x_ptr + offs, mask=mask, other=0.0)\ntl.store(out_ptr + pid, tl.sum(x))", F32, 256),
    ("arith_float", "x = tl.load(x_ptr + offs)\ny = tl.load(y_ptr + offs)\nz = (x + y) * (x - y) / (y + 1.0) - x // y + x % y + x ** 2 + -x + y ** 0.5\ntl.store(out_ptr + offs, z)", F32, 128),
    ("arith_int", "z = offs // 3 + offs % 5 + offs ** 2 - (-offs) + (~offs) + (offs << 1) + (offs >> 1) + (offs ^ 7) + (offs & 3) + (offs | 8)\ntl.store(out_ptr + offs, z, mask=mask)", I32, 128),
    ("int_true_div", "tl.store(out_ptr + offs, offs / 2, mask=mask)", F32, 128),
    ("compare_masks", "m = ((offs > 3) & (offs < n)) | (offs == 0) | ~(offs != 5) ^ (offs <= 1)\ntl.store(out_ptr + offs, m, mask=m & mask)", Bool, 128),
    ("where", "x = tl.load(x_ptr + offs)\ntl.store(out_ptr + offs, tl.where(x > 0, x, 0.0))", F32, 128),
    ("maximum_minimum", "x = tl.load(x_ptr + offs)\ny = tl.load(y_ptr + offs)\ntl.store(out_ptr + offs, tl.maximum(x, y) + tl.minimum(x, 0.5))", F32, 128),
    ("exp", "tl.store(out_ptr + offs, tl.exp(tl.load(x_ptr + offs)))", F32, 128),
    ("exp2", "tl.store(out_ptr + offs, tl.exp2(tl.load(x_ptr + offs)))", F32, 128),
    ("log", "tl.store(out_ptr + offs, tl.log(tl.load(x_ptr + offs)))", F32, 128),
    ("log2", "tl.store(out_ptr + offs, tl.log2(tl.load(x_ptr + offs)))", F32, 128),
    ("sqrt", "tl.store(out_ptr + offs, tl.sqrt(tl.load(x_ptr + offs)))", F32, 128),
    ("rsqrt", "tl.store(out_ptr + offs, tl.rsqrt(tl.load(x_ptr + offs)))", F32, 128),
    ("abs", "tl.store(out_ptr + offs, tl.abs(tl.load(x_ptr + offs)))", F32, 128),
    ("abs_int", "tl.store(out_ptr + offs, tl.abs(offs - 64), mask=mask)", I32, 128),
    ("sin", "tl.store(out_ptr + offs, tl.sin(tl.load(x_ptr + offs)))", F32, 128),
    ("cos", "tl.store(out_ptr + offs, tl.cos(tl.load(x_ptr + offs)))", F32, 128),
    ("sigmoid", "tl.store(out_ptr + offs, tl.sigmoid(tl.load(x_ptr + offs)))", F32, 128),
    ("floor_ceil", "x = tl.load(x_ptr + offs)\ntl.store(out_ptr + offs, tl.floor(x) + tl.ceil(x))", F32, 128),
    ("math_on_int", "tl.store(out_ptr + offs, tl.exp(offs) + tl.sqrt(offs))", F32, 128),
    ("sum_all", "x = tl.load(x_ptr + offs, mask=mask, other=0.0)\ntl.store(out_ptr + offs, x - tl.sum(x, axis=0))", F32, 1024),
    ("max_all", "x = tl.load(x_ptr + offs, mask=mask, other=-float('inf'))\ntl.store(out_ptr + offs, x - tl.max(x, 0))", F32, 512),
    ("min_all_int", "tl.store(out_ptr + offs, offs - tl.min(offs), mask=mask)", I32, 128),
    ("sum_bool", "tl.store(out_ptr + pid, tl.sum(mask))", I32, 128),
    (
        "reduce_2d_axes",
        "r = tl.arange(0, 16)[:, None]\nc = tl.arange(0, 32)[None, :]\nx = tl.load(x_ptr + r * 32 + c)\ns0 = tl.sum(x, axis=0)\ns1 = tl.max(x, axis=1)\nm = tl.min(x, axis=1, keep_dims=True)\ntl.store(out_ptr + tl.arange(0, 32), s0)\ntl.store(out_ptr + 32 + tl.arange(0, 16), s1)\ntl.store(out_ptr + r * 32 + c, x - m + tl.sum(x))",
        F32,
        16,
    ),
    (
        "broadcast_2d",
        "r = tl.arange(0, 8)\nc = tl.arange(0, 64)\nx = tl.load(x_ptr + r[:, None] * 64 + c[None, :], mask=(r[:, None] < n) & (c[None, :] < n), other=0.0)\ny = tl.load(y_ptr + c)\ntl.store(out_ptr + r[:, None] * 64 + c[None, :], x * y[None, :] + r[:, None] + c)",
        F32,
        16,
    ),
    ("expand_scalar", "s = tl.load(x_ptr)\nb = s[None]\ntl.store(out_ptr + tl.arange(0, 1), b)", F32, 16),
    ("cast_int", "x = tl.load(x_ptr + offs)\ntl.store(out_ptr + offs, x.to(tl.int32) + tl.cast(x > 0, tl.int32))", I32, 128),
    ("cast_f16_store", "x = tl.load(x_ptr + offs, mask=mask)\ntl.store(out_ptr + offs, x.to(tl.float16), mask=mask)", F16, 128),
    ("implicit_store_cast", "tl.store(out_ptr + offs, tl.load(x_ptr + offs), mask=mask)", F16, 128),
    ("store_u8", "tl.store(out_ptr + offs, offs.to(tl.uint8), mask=mask)", U8, 128),
    ("store_i8", "tl.store(out_ptr + offs, (offs - 64).to(tl.int8), mask=mask)", I8, 128),
    ("store_bool", "tl.store(out_ptr + offs, offs > 5, mask=mask)", Bool, 128),
    ("zeros_full", "a = tl.zeros((BLOCK,), dtype=tl.int32)\nb = tl.full((BLOCK,), 3, tl.int32)\nc = tl.zeros([BLOCK], tl.float32)\ntl.store(out_ptr + offs, a + b + offs + c.to(tl.int32), mask=mask)", I32, 128),
    ("element_ty", "acc = tl.zeros((BLOCK,), dtype=out_ptr.dtype.element_ty)\ntl.store(out_ptr + offs, acc + 1, mask=mask)", F32, 128),
    ("full_runtime_value", "v = tl.load(x_ptr)\ntl.store(out_ptr + offs, tl.full((BLOCK,), v, tl.float32), mask=mask)", F32, 128),
    ("loop_range", "acc = tl.zeros((BLOCK,), dtype=tl.float32)\nfor i in range(0, n):\n    acc += tl.load(x_ptr + i * BLOCK + tl.arange(0, BLOCK))\ntl.store(out_ptr + offs, acc)", F32, 128),
    ("loop_tl_range_step", "acc = 0.0\nfor i in tl.range(pid, n, tl.num_programs(0), num_stages=3, loop_unroll_factor=2):\n    acc = acc + tl.load(x_ptr + i)\ntl.store(out_ptr + pid, acc)", F32, 128),
    ("loop_nested_carried_ptr", "p = x_ptr + offs\nacc = tl.zeros((BLOCK,), dtype=tl.float32)\nfor i in range(4):\n    for j in range(2):\n        acc += tl.load(p)\n        p += BLOCK\ntl.store(out_ptr + offs, acc)", F32, 64),
    ("loop_negative_step", "acc = 0\nfor i in range(10, 0, -2):\n    acc += i\ntl.store(out_ptr + offs, acc + offs, mask=mask)", I32, 64),
    ("loop_reduction_inside", "m = -float('inf')\nfor i in range(0, n, BLOCK):\n    m = tl.maximum(m, tl.max(tl.load(x_ptr + i + tl.arange(0, BLOCK))))\ntl.store(out_ptr + pid, m)", F32, 256),
    ("static_range", "acc = tl.zeros((BLOCK,), dtype=tl.float32)\nfor i in tl.static_range(4):\n    acc += tl.load(x_ptr + offs + i * n) * (i + 1)\ntl.store(out_ptr + offs, acc)", F32, 128),
    ("if_runtime", "x = tl.load(x_ptr + offs)\nif n > 10:\n    x = x * 2.0\nelse:\n    x = x + 1.0\ntl.store(out_ptr + offs, x)", F32, 128),
    ("if_defines_in_both_branches", "x = tl.load(x_ptr + offs)\nif n > 10:\n    y = x * 2.0\n    s = 1\nelse:\n    y = x + 1\n    s = n\ntl.store(out_ptr + offs, y + s)", F32, 128),
    ("loop_bound_from_memory", "m = tl.load(x_ptr).to(tl.int32)\nacc = 0.0\nfor i in range(m):\n    acc += tl.sum(tl.load(y_ptr + offs + i))\nif tl.load(x_ptr + 1) > 0:\n    acc += tl.max(tl.load(y_ptr + offs))\ntl.store(out_ptr + pid, acc)", F32, 128),
    ("early_return", "if pid * BLOCK >= n:\n    return\nx = tl.load(x_ptr + offs)\nfor i in range(n):\n    if tl.sum(x) > i:\n        return\n    x = x + 1.0\ntl.store(out_ptr + offs, tl.max(x) + x)", F32, 128),
    ("if_reduction_cond", "x = tl.load(x_ptr + offs)\nif tl.sum(x) > 0.0:\n    x = x - tl.max(x)\ntl.store(out_ptr + offs, x)", F32, 128),
    ("if_constexpr", "x = tl.load(x_ptr + offs)\nif BLOCK == 128:\n    x = helper_scale(x)\nelif BLOCK > 1000:\n    x = -x\ntl.store(out_ptr + offs, x)", F32, 128),
    ("helper_kwargs", "x = tl.load(x_ptr + offs)\ntl.store(out_ptr + offs, helper_scale(x, factor=3.0) + helper_scale(1.0))", F32, 128),
    ("dot", "r = tl.arange(0, 16)\nc = tl.arange(0, 32)\na = tl.load(x_ptr + r[:, None] * 32 + c[None, :])\nb = tl.load(y_ptr + c[:, None] * 16 + r[None, :])\ntl.store(out_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))", F32, 16),
    ("dot_acc_augassign", "r = tl.arange(0, 16)\na = tl.load(x_ptr + r[:, None] * 16 + r[None, :])\nacc = tl.zeros((16, 16), dtype=tl.float32)\nfor k in range(n):\n    acc += tl.dot(a, a)\n    acc = tl.dot(a, a, acc)\ntl.store(out_ptr + r[:, None] * 16 + r[None, :], acc)", F32, 16),
    ("program_ids_2d", "p1 = tl.program_id(axis=1)\np2 = tl.program_id(2)\nq = tl.num_programs(1) * p2 + p1\ntl.store(out_ptr + q * BLOCK + tl.arange(0, BLOCK), q)", I32, 32),
    ("cdiv_min_max", "nb = tl.cdiv(n, BLOCK)\nlo = min(nb, 4)\nhi = max(nb, 1, lo)\ntl.store(out_ptr + pid, lo + hi + tl.cdiv(100, BLOCK))", I32, 32),
    ("hints", "o = tl.multiple_of(offs, 16)\no = tl.max_contiguous(o, 16)\ntl.static_assert(BLOCK >= 16, 'block too small')\ntl.assume(n > 0)\ntl.debug_barrier()\ntl.store(out_ptr + o, tl.load(x_ptr + o, mask=mask, cache_modifier='.cg', eviction_policy='evict_last'), mask=mask)", F32, 64),
    ("tuple_unpack_scalar_kernel", "a, b = n * 2, n + 1\nc = n if BLOCK > 1 else 0\ntl.store(out_ptr, a + b + c)", I32, 1),
    ("scalar_bool_ops", "if (n > 3 and n < 100) or not (n == 7):\n    tl.store(out_ptr + pid, 1)", I32, 32),
    ("view_shape", "tl.store(out_ptr + offs, offs * offs.shape[0] + len(offs.shape), mask=mask)", I32, 64),
];

fn source(body: &str) -> String {
    let mut s = HEADER.to_string();
    for l in body.lines() {
        s.push_str("    ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

fn args(out: DType, block: i64) -> Vec<mpsrt_jit::ArgSpec> {
    vec![ptr(F32), ptr(F32), ptr(out), scalar(I32), int(block)]
}

#[test]
fn feature_table_compiles_validates_and_translates_to_msl() {
    let mut failures = Vec::new();
    for (name, body, out, block) in CASES {
        if let Err(e) = check(&source(body), Some("kernel"), args(*out, *block)) {
            failures.push(format!("--- {name}:\n{e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn packed_pointer_inputs() {
    for d in [F16, U8, I8, Bool, I32] {
        let src = source("x = tl.load(x_ptr + offs, mask=mask)\ntl.store(out_ptr + offs, x.to(tl.float32) + 1, mask=mask)");
        compile_ok(&src, Some("kernel"), vec![ptr(d), ptr(F32), ptr(F32), scalar(I32), int(128)]);
    }
}

#[test]
fn runtime_scalar_types() {
    let src = "import mpsrt.language as tl\n@mpsrt.jit\ndef k(out_ptr, a, b, c):\n    if c:\n        tl.store(out_ptr, a * b)\n";
    for d in [F32, F16] {
        let k = compile_ok(src, None, vec![ptr(F32), scalar(d), scalar(I32), scalar(Bool)]);
        assert_eq!(k.workgroup_size, 1);
    }
}

#[test]
fn constexpr_specialization_changes_code_and_key() {
    let src =
        source("x = tl.load(x_ptr + offs, mask=mask)\ntl.store(out_ptr + offs, x, mask=mask)");
    let a = compile_ok(&src, None, args(F32, 64));
    let b = compile_ok(&src, None, args(F32, 128));
    let c = compile_ok(&src, None, args(F16, 128));
    assert_ne!(a.wgsl, b.wgsl);
    assert_ne!(a.cache_key, b.cache_key);
    assert_ne!(b.cache_key, c.cache_key);
    assert_eq!(
        b.cache_key,
        compile_ok(&src, None, args(F32, 128)).cache_key,
        "keys are deterministic"
    );
}

#[test]
fn indented_source_is_dedented() {
    let src = "    import mpsrt.language as tl\n    @triton.jit\n    def k(o):\n        tl.store(o, 1.0)\n";
    compile_ok(src, None, vec![ptr(F32)]);
}

#[test]
fn aliases_keep_their_value_when_a_loop_variable_changes() {
    // `p` shares the WGSL variable of `offs`; updating `offs` must not move `p`.
    let src = source("p = x_ptr + offs\nfor i in range(n):\n    q = offs\n    offs = offs + 1\n    tl.store(out_ptr + q, tl.load(p))");
    let k = compile_ok(&src, Some("kernel"), args(F32, 64));
    assert!(k.wgsl.contains("var c"), "a snapshot variable is made for the aliases:\n{}", k.wgsl);
}
