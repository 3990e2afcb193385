//! Unsupported constructs and user mistakes are compile errors located at the Python line and
//! column, saying what is supported. Cases are data: (kernel body, expected message fragment).

use mpsrt_core::DType;
use mpsrt_jit::{compile, ArgSpec, CompileOptions, ConstValue, KernelSignature};

const HEADER: &str = "import mpsrt
import mpsrt.language as tl

@mpsrt.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
";

/// (body, expected fragment). Bodies start on line 7, indented by 4 (column 5).
const CASES: &[(&str, &str)] = &[
    ("while n > 0:\n    n = n - 1", "line 7, col 5: `while` loop is not supported"),
    (
        "try:\n    pass\nexcept Exception:\n    pass",
        "line 7, col 5: `try` statement is not supported",
    ),
    ("x = [i for i in range(4)]", "line 7, col 9: a list comprehension is not supported"),
    (
        "tl.atomic_add(out_ptr, 1)",
        "line 7, col 5: tl.atomic_add is not supported; supported: program_id",
    ),
    ("a = tl.arange(0, 100)", "line 7, col 9: tl.arange length must be a power of two, got 100"),
    ("y = foo(offs)", "line 7, col 9: undefined name `foo`"),
    (
        "a = tl.arange(0, 16)\nb = tl.arange(0, 32)\nc = a + b",
        "line 9, col 9: block shapes [16] and [32] cannot be broadcast together",
    ),
    (
        "x = tl.load(x_ptr + offs)\nfor i in range(3):\n    x = x.to(tl.int32)",
        "line 9, col 9: variable `x` changes type from float32 to int32",
    ),
    ("x = tl.load(offs)", "line 7, col 9: tl.load() needs a pointer"),
    (
        "x = tl.load(x_ptr + offs, mask=tl.arange(0, 2 * BLOCK) < n)",
        "line 7, col 9: mask shape [32] does not broadcast to the pointer shape [16]",
    ),
    ("with open('f') as f:\n    pass", "line 7, col 5: `with` statement is not supported"),
    ("for i in [1, 2]:\n    pass", "line 7, col 14: `for` loops must iterate over range"),
    ("x = lambda: 1", "line 7, col 9: `lambda` is not supported"),
    ("x = offs[0]", "line 7, col 9: only `:` and `None` subscripts are supported"),
    (
        "x = tl.zeros((BLOCK, 3), dtype=tl.float32)",
        "line 7, col 9: block dimensions must be constexpr powers of two",
    ),
    (
        "x = tl.zeros((2, 2, 2), dtype=tl.float32)",
        "line 7, col 9: blocks of rank > 2 are not supported",
    ),
    ("x = tl.dot(offs, offs)", "line 7, col 9: tl.dot needs two 2-D blocks"),
    ("x = x_ptr * 2", "line 7, col 9: unsupported pointer arithmetic"),
    (
        "x = tl.load(x_ptr + offs, foo=1)",
        "line 7, col 9: tl.load() got an unsupported keyword argument `foo`",
    ),
    ("for i in range(4):\n    break", "line 8, col 9: `break` is not supported"),
    ("if n > 0:\n    return 1", "line 8, col 9: a kernel cannot return a value"),
    ("x = 1 < n < 3", "line 7, col 9: chained comparisons"),
    ("x = tl.sum(offs, axis=2)", "line 7, col 9: reduction axis must be a constexpr int in range"),
    (
        "tl.static_assert(BLOCK > 100, 'too small')",
        "line 7, col 5: static assertion failed too small",
    ),
    (
        "x = offs.to(tl.float32, bitcast=True)",
        "line 7, col 9: x.to(dtype, bitcast=True) is not supported",
    ),
    ("x = f'{n}'", "line 7, col 9: an f-string is not supported"),
    ("x = tl.program_id(3)", "line 7, col 9: tl.program_id() axis must be a constexpr 0, 1 or 2"),
    ("x = 2 ** 70", "line 7, col 9: constexpr integer overflow"),
    ("x = offs + 3000000000", "line 7, col 9: integer 3000000000 does not fit in int32"),
    (
        "for i in tl.static_range(n):\n    pass",
        "line 7, col 14: tl.static_range bounds must be constexpr ints",
    ),
    (
        "x = tl.load(x_ptr + offs)\nx[0] = 1",
        "line 8, col 5: only plain names and tuples of names can be assigned to",
    ),
    ("import os\nx = os.getcwd()", "line 8, col 9: undefined name `os`"),
    ("x = n +", "line 7, col 12: Python syntax error"),
    ("x = -(-9223372036854775807 - 1)", "line 7, col 9: constexpr integer overflow"),
    ("x = (-9223372036854775807 - 1) // -1", "line 7, col 9: constexpr integer overflow"),
    (
        "a = tl.arange(0, 1024)\nb = a[:, None] + tl.arange(0, 2048)[None, :]",
        "line 8, col 9: broadcasting gives a block of shape [1024, 2048]",
    ),
    (
        "x = tl.arange(-9223372036854775807, 9223372036854775807)",
        "line 7, col 9: tl.arange length must be a power of two",
    ),
];

fn args() -> Vec<ArgSpec> {
    vec![
        ArgSpec::Pointer { dtype: DType::F32 },
        ArgSpec::Pointer { dtype: DType::F32 },
        ArgSpec::Scalar { dtype: DType::I32 },
        ArgSpec::Constexpr { value: ConstValue::Int(16) },
    ]
}

#[test]
fn unsupported_constructs_are_located_errors() {
    let mut failures = Vec::new();
    for (body, want) in CASES {
        let mut src = HEADER.to_string();
        for l in body.lines() {
            src.push_str("    ");
            src.push_str(l);
            src.push('\n');
        }
        match compile(&src, None, &KernelSignature { args: args() }, &CompileOptions::default()) {
            Ok(_) => {
                failures.push(format!("{body:?}: compiled, expected error containing {want:?}"))
            }
            Err(e) => {
                let msg = e.to_string();
                if !msg.contains(want) {
                    failures.push(format!("{body:?}:\n   got  {msg}\n   want {want}"));
                }
            }
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
fn signature_errors() {
    let sig = |args| KernelSignature { args };
    let opts = CompileOptions::default();
    let src = format!("{HEADER}    tl.store(out_ptr + offs, offs)\n");
    let cases: Vec<(KernelSignature, &str)> = vec![
        (sig(args()[..3].to_vec()), "kernel `kernel` has 4 parameters but the launch passed 3"),
        (
            sig(vec![args()[0].clone(), args()[1].clone(), args()[2].clone(), ArgSpec::Scalar { dtype: DType::I32 }]),
            "line 5, col 31: parameter `BLOCK` is tl.constexpr but the launch passed a tensor or runtime scalar",
        ),
        (
            sig(vec![ArgSpec::Pointer { dtype: DType::F64 }, args()[1].clone(), args()[2].clone(), args()[3].clone()]),
            "pointer parameter `x_ptr` has dtype float64",
        ),
        (
            sig(vec![args()[0].clone(), args()[1].clone(), ArgSpec::Scalar { dtype: DType::I64 }, args()[3].clone()]),
            "scalar parameter `n` has dtype int64",
        ),
    ];
    for (s, want) in cases {
        let e = compile(&src, None, &s, &opts).expect_err(want).to_string();
        assert!(e.contains(want), "got {e}\nwant {want}");
    }
    let e =
        compile(&src, Some("nope"), &sig(args()), &opts).expect_err("unknown kernel").to_string();
    assert!(e.contains("no @jit function named `nope`"), "{e}");
    let e = compile("def f(): pass", None, &sig(args()), &opts).expect_err("no jit").to_string();
    assert!(e.contains("no function decorated with @jit"), "{e}");
}

#[test]
fn oversized_blocks_exceed_workgroup_memory() {
    let src = "import mpsrt.language as tl\n@mpsrt.jit\ndef k(a, o):\n    r = tl.arange(0, 128)\n    x = tl.load(a + r[:, None] * 128 + r[None, :])\n    tl.store(o + r[:, None] * 128 + r[None, :], tl.dot(x, x))\n";
    let sig = KernelSignature {
        args: vec![ArgSpec::Pointer { dtype: DType::F32 }, ArgSpec::Pointer { dtype: DType::F32 }],
    };
    let e = compile(src, None, &sig, &CompileOptions::default()).expect_err("too big").to_string();
    assert!(e.contains("bytes of workgroup memory"), "{e}");
}

#[test]
fn return_in_runtime_if_of_a_helper_is_an_error() {
    let src = "import mpsrt.language as tl\n@mpsrt.jit\ndef h(x, n):\n    if n > 0:\n        return x\n    return -x\n@mpsrt.jit\ndef k(o, n):\n    tl.store(o, h(1.0, n))\n";
    let sig = KernelSignature {
        args: vec![ArgSpec::Pointer { dtype: DType::F32 }, ArgSpec::Scalar { dtype: DType::I32 }],
    };
    let e = compile(src, Some("k"), &sig, &CompileOptions::default())
        .expect_err("unsupported")
        .to_string();
    assert!(e.contains("line 4, col 5: `return` inside an `if` on a runtime value is only supported in the kernel"), "{e}");
}
