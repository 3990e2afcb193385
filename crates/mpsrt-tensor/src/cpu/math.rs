//! Scalar semantics of the elementwise primitives on the CPU, written independently of the WGSL
//! helpers: NumPy behaviour at the edges (NaN-propagating max/min, `log(-1) = NaN`,
//! `log(0) = -inf`, round half to even, stable sigmoid, saturating float→int casts).

use mpsrt_kernels::{BinaryFn, UnaryFn};

macro_rules! float_math {
    ($name_u:ident, $name_b:ident, $t:ty, $erf:path) => {
        // `inline(always)`: the column loops call these with a literal op, so the match folds
        // away and the loop vectorizes.
        #[inline(always)]
        pub(crate) fn $name_u(f: UnaryFn, x: $t) -> $t {
            use UnaryFn::*;
            match f {
                Neg => -x,
                Abs => x.abs(),
                Sign => {
                    if x > 0.0 {
                        1.0
                    } else if x < 0.0 {
                        -1.0
                    } else {
                        x
                    }
                }
                Relu => {
                    if x < 0.0 {
                        0.0
                    } else {
                        x
                    }
                }
                Exp => x.exp(),
                Log => x.ln(),
                Sqrt => x.sqrt(),
                Sigmoid => {
                    if x >= 0.0 {
                        1.0 / (1.0 + (-x).exp())
                    } else {
                        let e = x.exp();
                        e / (1.0 + e)
                    }
                }
                Tanh => x.tanh(),
                Erf => $erf(x),
                Floor => x.floor(),
                Ceil => x.ceil(),
                Round => x.round_ties_even(),
                Sin => x.sin(),
                Cos => x.cos(),
                Recip => 1.0 / x,
                Asin => x.asin(),
                Acos => x.acos(),
                Atan => x.atan(),
                // Bool/int-only and bool-valued functions never reach float math (type-checked
                // earlier).
                Not | IsNan | BitNot => x,
            }
        }

        #[inline(always)]
        pub(crate) fn $name_b(f: BinaryFn, a: $t, b: $t) -> $t {
            use BinaryFn::*;
            match f {
                Add => a + b,
                Sub => a - b,
                Mul => a * b,
                Div => a / b,
                Pow => a.powf(b),
                Max => {
                    if a.is_nan() || b.is_nan() {
                        <$t>::NAN
                    } else {
                        a.max(b)
                    }
                }
                Min => {
                    if a.is_nan() || b.is_nan() {
                        <$t>::NAN
                    } else {
                        a.min(b)
                    }
                }
                // Comparisons and logic produce bools and are handled by the caller.
                _ => <$t>::NAN,
            }
        }
    };
}

float_math!(unary_f32, binary_f32, f32, libm::erff);
float_math!(unary_f64, binary_f64, f64, libm::erf);

macro_rules! int_math {
    ($name_u:ident, $name_b:ident, $t:ty) => {
        pub(crate) fn $name_u(f: UnaryFn, x: $t) -> $t {
            match f {
                UnaryFn::Neg => x.wrapping_neg(),
                UnaryFn::Abs => x.wrapping_abs(),
                UnaryFn::Sign => x.signum(),
                UnaryFn::Relu => x.max(0),
                UnaryFn::BitNot => !x,
                _ => x,
            }
        }

        pub(crate) fn $name_b(f: BinaryFn, a: $t, b: $t) -> $t {
            use BinaryFn::*;
            match f {
                Add => a.wrapping_add(b),
                Sub => a.wrapping_sub(b),
                Mul => a.wrapping_mul(b),
                Max => a.max(b),
                Min => a.min(b),
                BitAnd => a & b,
                BitOr => a | b,
                BitXor => a ^ b,
                // ONNX BitShift: shifts outside the width give 0 (left) or the sign fill (right).
                Shl if (0..<$t>::BITS as $t).contains(&b) => a.wrapping_shl(b as u32),
                Shl => 0,
                Shr if (0..<$t>::BITS as $t).contains(&b) => a >> b,
                Shr => a >> (<$t>::BITS - 1),
                Pow => {
                    if b < 0 {
                        match a {
                            1 => 1,
                            -1 => {
                                if b & 1 == 1 {
                                    -1
                                } else {
                                    1
                                }
                            }
                            _ => 0,
                        }
                    } else {
                        let (mut r, mut base, mut e) = (1 as $t, a, b);
                        while e != 0 {
                            if e & 1 == 1 {
                                r = r.wrapping_mul(base);
                            }
                            base = base.wrapping_mul(base);
                            e >>= 1;
                        }
                        r
                    }
                }
                // Div on ints is rejected by the type checker; comparisons are the caller's.
                _ => 0,
            }
        }
    };
}

int_math!(unary_i32, binary_i32, i32);
int_math!(unary_i64, binary_i64, i64);

/// Comparison on any ordered type.
pub(crate) fn compare<T: PartialOrd>(f: BinaryFn, a: T, b: T) -> bool {
    use BinaryFn::*;
    match f {
        Eq => a == b,
        Ne => a != b,
        Lt => a < b,
        Le => a <= b,
        Gt => a > b,
        Ge => a >= b,
        _ => false,
    }
}

pub(crate) fn is_comparison(f: BinaryFn) -> bool {
    use BinaryFn::*;
    matches!(f, Eq | Ne | Lt | Le | Gt | Ge)
}

/// f32 → i32 as the GPU does it: NaN → 0, saturating at the range.
pub(crate) fn f_to_i32(x: f64) -> i32 {
    x as i32
}
