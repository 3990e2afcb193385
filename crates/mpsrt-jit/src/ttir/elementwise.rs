//! `arith.*`, `math.*` and the elementwise `tt.*` ops: each renders one WGSL expression per
//! element from its operands' expressions (registers hold f16 as f32 and narrow ints as i32;
//! results are re-rounded / re-wrapped with [`normalize`], as in the Python frontend), and
//! `arith.constant`.

use super::lower::{TtirLowerer, V};
use super::parse::{Elem, Op, Type};
use crate::value::{cast_expr, normalize, Tensor, Ty};
use mpsrt_core::{DType, Result};

impl TtirLowerer {
    /// Lowers an elementwise op; `None` if `op` is not one.
    pub(super) fn elementwise(&mut self, op: &Op, ops: &[String], tys: &str) -> Result<Option<V>> {
        let name = op.name.as_str();
        let Some(kind) = classify(name) else { return Ok(None) };
        let ins: Vec<V> = ops.iter().map(|o| self.get(o)).collect::<Result<_>>()?;
        let want = match kind {
            Kind::Cmp => 2,
            Kind::Select | Kind::Fma | Kind::Clamp => 3,
            Kind::Bin(_) => 2,
            Kind::Un(_) | Kind::Cast => 1,
        };
        if ins.len() != want {
            return Err(self.err(format!("expected {want} operands, got {}", ins.len())));
        }
        let out = self.out_type(tys)?;
        let shape = ins.iter().map(|v| v.shape().to_vec()).max_by_key(Vec::len).unwrap_or_default();
        let in_d = ins[0].ty().dtype().unwrap_or(DType::I32);
        let Elem::D(d) = out.elem else {
            return Err(self.err("pointer-typed elementwise ops are not supported"));
        };
        let wide = d == DType::I64 || ins.iter().any(|v| v.ty() == Ty::D(DType::I64));
        let pred = op.body.split([' ', ',']).next().unwrap_or("");
        // Zero-extending a bool or a byte is exact; zero-extending an int32 is not.
        let small_ext = name == "arith.extui" && !matches!(in_d, DType::I32 | DType::I64);
        let unsigned = I64_UNSIGNED.contains(&name) && !small_ext
            || name == "arith.cmpi" && matches!(pred, "ult" | "ule" | "ugt" | "uge");
        if wide && unsigned {
            return Err(self.err(format!(
                "`{name}` on int64 values is not supported: WGSL has no 64-bit integers and mpsrt computes int64 in 32 bits, which is exact for signed values in the int32 range but not for unsigned ops (a small negative int64 is a huge unsigned one); keep this arithmetic in int32"
            )));
        }
        let refs: Vec<&V> = ins.iter().collect();
        let v = match kind {
            Kind::Cmp => {
                let pred = op.body.split([' ', ',']).next().unwrap_or("").to_string();
                let f = cmp(name == "arith.cmpf", &pred)
                    .ok_or_else(|| self.err(format!("unknown predicate `{pred}`")))?;
                self.map(Ty::D(DType::Bool), &shape, &refs, move |a| f(&a[0], &a[1]))
            }
            Kind::Select => {
                let ty = ins[1].ty();
                self.map(ty, &shape, &refs, |a| format!("select({}, {}, {})", a[2], a[1], a[0]))
            }
            Kind::Fma => self.map(Ty::D(d), &shape, &refs, move |a| {
                normalize(&format!("fma({}, {}, {})", a[0], a[1], a[2]), d)
            }),
            Kind::Clamp => self.map(Ty::D(d), &shape, &refs, move |a| {
                format!("clamp({}, {}, {})", a[0], a[1], a[2])
            }),
            Kind::Bin(sym) => {
                let float = d.is_float();
                let e = move |a: &[String]| -> String {
                    let (x, y) = (&a[0], &a[1]);
                    let u = |s: &str| format!("u32({s})");
                    let r = match sym {
                        "max" | "min" => format!("{sym}({x}, {y})"),
                        "umax" | "umin" => format!("i32({}({}, {}))", &sym[1..], u(x), u(y)),
                        "udiv" => format!("i32({} / {})", u(x), u(y)),
                        "urem" => format!("i32({} % {})", u(x), u(y)),
                        "<<" | ">>" => format!("({x} {sym} u32({y}))"),
                        "ushr" => format!("i32({} >> u32({y}))", u(x)),
                        "^" if d == DType::Bool => format!("({x} != {y})"),
                        "pow" => format!("pow({x}, {y})"),
                        _ => format!("({x} {sym} {y})"),
                    };
                    if float || d == DType::I8 || d == DType::U8 {
                        normalize(&r, d)
                    } else {
                        r
                    }
                };
                self.map(Ty::D(d), &shape, &refs, e)
            }
            Kind::Un(f) => {
                let r = |a: &[String]| {
                    let x = &a[0];
                    let r = match f {
                        "neg" => format!("(-{x})"),
                        "rsqrt" => format!("inverseSqrt({x})"),
                        "erf" => erf(x),
                        _ => format!("{f}({x})"),
                    };
                    normalize(&r, d)
                };
                self.map(Ty::D(d), &shape, &refs, r)
            }
            Kind::Cast => {
                let from = in_d;
                let f = cast(name, from, d).ok_or_else(|| {
                    self.err(format!("conversion from {from} to {d} is not supported"))
                })?;
                self.map(Ty::D(d), &shape, &refs, move |a| f(&a[0]))
            }
        };
        Ok(Some(v))
    }

    /// `arith.constant` / `ub.poison`: a scalar, or a splat of one (dense splat constants).
    pub(super) fn constant(&mut self, op: &Op, tys: &str) -> Result<V> {
        let t = match op.body.as_str() {
            // `arith.constant true` prints without a type.
            "true" | "false" => Type { shape: Vec::new(), elem: Elem::D(DType::Bool) },
            _ => self.out_type(tys)?,
        };
        let Elem::D(d) = t.elem else {
            return Err(self.err("pointer constants are not supported"));
        };
        let text = op.body.split(" : ").next().unwrap_or("").trim();
        let text = text.strip_prefix("dense<").map_or(text, |x| x.trim_end_matches('>'));
        let v = if op.name == "ub.poison" || text.is_empty() {
            0.0
        } else if text.starts_with('[') {
            return Err(self.err("non-splat dense constants are not supported"));
        } else {
            self.number(text, d)?
        };
        if !d.is_float() && d != DType::Bool && (v < f64::from(i32::MIN) || v > f64::from(u32::MAX))
        {
            return Err(self.err(format!("constant {text} does not fit in 32 bits")));
        }
        let s = Tensor::scalar(crate::value::literal(v, d), Ty::D(d));
        Ok(if t.shape.is_empty() { V::T(s) } else { V::Splat(s, t.shape) })
    }

    fn number(&self, text: &str, d: DType) -> Result<f64> {
        let bad = || self.err(format!("cannot read the constant `{text}`"));
        Ok(match text {
            "true" => 1.0,
            "false" => 0.0,
            _ if text.starts_with("0x") => {
                let bits = u64::from_str_radix(&text[2..], 16).map_err(|_| bad())?;
                match d {
                    DType::F16 => half::f16::from_bits(bits as u16).to_f64(),
                    DType::F32 => f64::from(f32::from_bits(bits as u32)),
                    DType::F64 => f64::from_bits(bits),
                    _ => bits as i64 as f64,
                }
            }
            _ => text.parse::<f64>().map_err(|_| bad())?,
        })
    }
}

/// Unsigned ops, refused on int64 values. WGSL has no 64-bit integers, so int64 values are
/// computed in 32 bits. That is exact for signed arithmetic whose values stay in the int32 range:
/// every int64 value a kernel sees starts there (int64 constants outside it are refused at
/// compile time, int64 arguments outside it by the launcher, and int64 tensors cannot be bound
/// on the GPU), and index arithmetic (`.to(tl.int64)` offsets, tensor descriptors' bounds
/// checks) leaves it only for addresses past any bindable buffer (under 2^31 elements).
/// Add/sub/mul/shl/bitwise results are exact modulo 2^32 even past it. Unsigned ops read a small
/// negative int64 as a huge number that 32 bits cannot hold, so they are refused by name.
/// Emulating int64 with vec2<u32> would slow every such kernel's address math several-fold for
/// values that never need it (issue 24).
pub(super) const I64_UNSIGNED: &[&str] = &[
    "arith.divui",
    "arith.remui",
    "arith.shrui",
    "arith.maxui",
    "arith.minui",
    "arith.uitofp",
    "arith.fptoui",
    "arith.extui",
];

#[derive(Clone, Copy)]
enum Kind {
    Bin(&'static str),
    Un(&'static str),
    Cmp,
    Select,
    Fma,
    Clamp,
    Cast,
}

fn classify(name: &str) -> Option<Kind> {
    Some(match name {
        "arith.addi" | "arith.addf" => Kind::Bin("+"),
        "arith.subi" | "arith.subf" => Kind::Bin("-"),
        "arith.muli" | "arith.mulf" => Kind::Bin("*"),
        "arith.divsi" | "arith.divf" | "tt.precise_divf" => Kind::Bin("/"),
        "arith.remsi" | "arith.remf" => Kind::Bin("%"),
        "arith.divui" => Kind::Bin("udiv"),
        "arith.remui" => Kind::Bin("urem"),
        "arith.andi" => Kind::Bin("&"),
        "arith.ori" => Kind::Bin("|"),
        "arith.xori" => Kind::Bin("^"),
        "arith.shli" => Kind::Bin("<<"),
        "arith.shrsi" => Kind::Bin(">>"),
        "arith.shrui" => Kind::Bin("ushr"),
        "arith.maxsi" | "arith.maxnumf" | "arith.maximumf" => Kind::Bin("max"),
        "arith.minsi" | "arith.minnumf" | "arith.minimumf" => Kind::Bin("min"),
        "arith.maxui" => Kind::Bin("umax"),
        "arith.minui" => Kind::Bin("umin"),
        "math.powf" => Kind::Bin("pow"),
        "arith.negf" => Kind::Un("neg"),
        "math.exp" => Kind::Un("exp"),
        "math.exp2" => Kind::Un("exp2"),
        "math.log" => Kind::Un("log"),
        "math.log2" => Kind::Un("log2"),
        "math.sqrt" | "tt.precise_sqrt" => Kind::Un("sqrt"),
        "math.rsqrt" => Kind::Un("rsqrt"),
        "math.sin" => Kind::Un("sin"),
        "math.cos" => Kind::Un("cos"),
        "math.tan" => Kind::Un("tan"),
        "math.tanh" => Kind::Un("tanh"),
        "math.absf" | "math.absi" => Kind::Un("abs"),
        "math.floor" => Kind::Un("floor"),
        "math.ceil" => Kind::Un("ceil"),
        "math.roundeven" => Kind::Un("round"),
        "math.trunc" => Kind::Un("trunc"),
        "math.erf" => Kind::Un("erf"),
        "math.fma" => Kind::Fma,
        "tt.clampf" => Kind::Clamp,
        "arith.cmpi" | "arith.cmpf" => Kind::Cmp,
        "arith.select" => Kind::Select,
        "arith.extf" | "arith.truncf" | "arith.sitofp" | "arith.uitofp" | "arith.fptosi"
        | "arith.fptoui" | "arith.extsi" | "arith.extui" | "arith.trunci" | "arith.bitcast"
        | "tt.bitcast" | "arith.index_cast" | "arith.index_castui" => Kind::Cast,
        _ => return None,
    })
}

type Render2 = Box<dyn Fn(&str, &str) -> String>;
type Render1 = Box<dyn Fn(&str) -> String>;

fn cmp(float: bool, pred: &str) -> Option<Render2> {
    let sym = match pred {
        "eq" | "oeq" => "==",
        "ne" | "une" => "!=",
        "slt" | "olt" => "<",
        "sle" | "ole" => "<=",
        "sgt" | "ogt" => ">",
        "sge" | "oge" => ">=",
        "ult" | "ule" | "ugt" | "uge" if !float => {
            let s = match pred {
                "ult" => "<",
                "ule" => "<=",
                "ugt" => ">",
                _ => ">=",
            };
            return Some(Box::new(move |a, b| format!("(u32({a}) {s} u32({b}))")));
        }
        // Unordered float predicates: true when either side is NaN.
        "ult" | "ule" | "ugt" | "uge" | "ueq" => {
            let s = match pred {
                "ult" => ">=",
                "ule" => ">",
                "ugt" => "<=",
                "uge" => "<",
                _ => "!=",
            };
            return Some(Box::new(move |a, b| format!("!({a} {s} {b})")));
        }
        "one" => return Some(Box::new(|a, b| format!("(({a} < {b}) || ({a} > {b}))"))),
        "ord" => return Some(Box::new(|a, b| format!("(({a} == {a}) && ({b} == {b}))"))),
        "uno" => return Some(Box::new(|a, b| format!("(({a} != {a}) || ({b} != {b}))"))),
        _ => return None,
    };
    Some(Box::new(move |a, b| format!("({a} {sym} {b})")))
}

fn cast(name: &str, from: DType, to: DType) -> Option<Render1> {
    Some(match name {
        "arith.extsi" if from == DType::Bool => Box::new(|a| format!("select(0i, -1i, {a})")),
        "arith.extui" if from == DType::Bool => Box::new(|a| format!("select(0i, 1i, {a})")),
        "arith.extui" if from == DType::I8 => Box::new(|a| format!("({a} & 255i)")),
        "arith.uitofp" => Box::new(move |a| normalize(&format!("f32(u32({a}))"), to)),
        "arith.fptoui" => Box::new(move |a| normalize(&format!("i32(u32({a}))"), to)),
        "arith.trunci" if to == DType::Bool => Box::new(|a| format!("(({a} & 1i) != 0i)")),
        "arith.bitcast" | "tt.bitcast" => match (from.is_float(), to.is_float()) {
            (true, false) if from == DType::F32 => Box::new(|a| format!("bitcast<i32>({a})")),
            (false, true) if to == DType::F32 => Box::new(|a| format!("bitcast<f32>({a})")),
            _ if from == to => Box::new(|a| a.to_string()),
            _ => return None,
        },
        _ if from == DType::F64 || to == DType::F64 && from != DType::F32 => return None,
        _ => Box::new(move |a| cast_expr(a, from, to)),
    })
}

/// erf(x) after Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7; WGSL has no erf).
fn erf(x: &str) -> String {
    format!(
        "(sign({x}) * (1.0f - (((((1.061405429f * (1.0f / (1.0f + 0.3275911f * abs({x})))) - 1.453152027f) * (1.0f / (1.0f + 0.3275911f * abs({x}))) + 1.421413741f) * (1.0f / (1.0f + 0.3275911f * abs({x}))) - 0.284496736f) * (1.0f / (1.0f + 0.3275911f * abs({x}))) + 0.254829592f) * (1.0f / (1.0f + 0.3275911f * abs({x}))) * exp(-{x} * {x})))"
    )
}
