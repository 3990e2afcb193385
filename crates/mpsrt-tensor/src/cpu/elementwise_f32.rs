//! The f32 fast path of the chunked elementwise evaluator (`elementwise.rs`): for trees that are
//! f32 throughout (inputs, scalars, arithmetic and float functions; no casts, comparisons or
//! selects) each chunk is evaluated with contiguous inputs borrowed in place, scalars kept as
//! constants instead of filled columns, and each node's result written over an operand's buffer
//! from a small per-chunk pool, so a BatchNorm + ReLU chain touches a few L2-resident buffers
//! instead of allocating and filling a column per node. Broadcast inputs that are constant over
//! runs of the output (per-channel BatchNorm parameters over each `H·W` plane) are read as
//! scalars run by run instead of being expanded (`const_runs`). The arithmetic is the same
//! `math::{unary,binary}_f32` the general path runs, so results are identical.

use super::elementwise::{Src, Strided};
use super::math;
use crate::Scalar;
use mpsrt_kernels::{BinaryFn, Expr, UnaryFn, VType};

/// Whether `e` takes the fast path given how each input is read (`srcs`).
pub(super) fn supported(e: &Expr, srcs: &[Src<'_>]) -> bool {
    match e {
        Expr::Input(i) => matches!(srcs.get(*i), Some(Src::F32(_) | Src::F32Strided(..))),
        Expr::Scalar(_, t) => *t == VType::Float,
        Expr::Cast(t, inner) => *t == VType::Float && supported(inner, srcs),
        Expr::Unary(f, inner) => {
            !matches!(f, UnaryFn::IsNan | UnaryFn::Not | UnaryFn::BitNot) && supported(inner, srcs)
        }
        Expr::Binary(f, a, b) => {
            use BinaryFn::*;
            matches!(f, Add | Sub | Mul | Div | Pow | Max | Min)
                && supported(a, srcs)
                && supported(b, srcs)
        }
        Expr::Select(..) => false,
    }
}

/// A node's value over one chunk.
enum V<'a> {
    /// Borrowed from a contiguous input.
    S(&'a [f32]),
    /// A buffer of this chunk (from `Pool`), free to overwrite.
    O(Vec<f32>),
    /// The same value everywhere (a scalar, or what a function of constants gives).
    C(f32),
}

/// Chunk buffers of one worker, handed back when their node is consumed and kept across
/// chunks (a thread-local free list).
struct Pool(Vec<Vec<f32>>, usize);

impl Pool {
    /// An empty buffer with room for a chunk.
    fn take(&mut self) -> Vec<f32> {
        let mut v = self.0.pop().unwrap_or_default();
        v.clear();
        v.reserve(self.1);
        v
    }
}

thread_local! {
    static FREE: std::cell::RefCell<Vec<Vec<f32>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Shortest run (in elements) worth evaluating with broadcast inputs as constants: below it the
/// per-run tree walk costs more than expanding the inputs.
const MIN_RUN: usize = 256;

/// The run length over which every broadcast input of `srcs` is constant, when all of them are
/// (per-channel parameters over `H·W` planes) and the runs are long enough: the chunk is then
/// evaluated run by run with those inputs as scalars, never expanded.
fn const_runs(srcs: &[Src<'_>]) -> Option<usize> {
    let mut run = usize::MAX;
    for s in srcs {
        if let Src::F32Strided(_, l) = s {
            run = run.min(l.run()?);
        }
    }
    (run != usize::MAX && run >= MIN_RUN).then_some(run)
}

/// Evaluates `$call` with the const `$k` set to `$pos` when it is one of the listed indices,
/// else to `$len`: one monomorphized loop per listed function, the generic loop for the rest.
macro_rules! with_k {
    ($pos:expr, $len:expr, [$($i:literal),*], $k:ident => $call:expr) => {
        match $pos {
            $(Some($i) => { const $k: usize = $i; $call })*
            _ => { const $k: usize = $len; $call }
        }
    };
}

/// [`with_k!`] over the entries of [`UN`].
macro_rules! with_un {
    ($pos:expr, $k:ident => $call:expr) => {
        with_k!($pos, UN.len(), [0, 1, 2, 3, 4, 5, 6], $k => $call)
    };
}

/// [`with_k!`] over the entries of [`BIN`].
macro_rules! with_bin {
    ($pos:expr, $k:ident => $call:expr) => {
        with_k!($pos, BIN.len(), [0, 1, 2, 3, 4, 5], $k => $call)
    };
}

/// A coefficient of [`Affine`]: constant over runs of a broadcast input, or one value.
#[derive(Clone, Copy)]
enum Coef<'s, 'a> {
    Run(&'a [f32], &'s Strided),
    Const(f32),
}

/// Walks a [`Coef`] run by run from some element on: the current value, how many elements of
/// its run are left, and (for a broadcast input) an odometer over the outer dims so moving to
/// the next run costs no divisions (they cost more than a 49-element run of a 7×7 plane).
struct Cursor<'a> {
    data: &'a [f32],
    shape: &'a [usize],
    strides: &'a [isize],
    idx: Vec<usize>,
    off: isize,
    run: usize,
    left: usize,
    value: f32,
}

impl<'a> Cursor<'a> {
    fn new(c: Coef<'a, 'a>, i: usize) -> Cursor<'a> {
        match c {
            Coef::Const(v) => Cursor {
                data: &[],
                shape: &[],
                strides: &[],
                idx: Vec::new(),
                off: 0,
                run: usize::MAX,
                left: usize::MAX,
                value: v,
            },
            Coef::Run(data, l) => {
                let (shape, strides) = l.outer();
                let run = l.run().unwrap_or(1).max(1);
                let (mut r, mut off, mut idx) =
                    (i / run, l.offset() as isize, vec![0; shape.len()]);
                for d in (0..shape.len()).rev() {
                    idx[d] = r % shape[d];
                    off += idx[d] as isize * strides[d];
                    r /= shape[d];
                }
                let value = data[off as usize];
                Cursor { data, shape, strides, idx, off, run, left: run - i % run, value }
            }
        }
    }

    /// Moves `n` elements on (`n <= self.left`).
    fn advance(&mut self, n: usize) {
        self.left -= n;
        if self.left > 0 || self.run == usize::MAX {
            return;
        }
        self.left = self.run;
        for d in (0..self.shape.len()).rev() {
            self.idx[d] += 1;
            self.off += self.strides[d];
            if self.idx[d] < self.shape[d] {
                break;
            }
            self.off -= self.shape[d] as isize * self.strides[d];
            self.idx[d] = 0;
        }
        // Past the last run the odometer wraps to the first: never read out of bounds.
        self.value = self.data[self.off as usize];
    }
}

/// `f(x * s + t)` with `x` a contiguous input and `s`, `t` constant over runs: inference
/// BatchNorm (+ activation) over an NCHW map, DenseNet's pre-activation. Evaluated in one
/// vectorized loop per run, so even the 49-element planes of a 7×7 map cost no tree walk.
struct Affine<'s, 'a> {
    x: &'a [f32],
    s: Coef<'s, 'a>,
    t: Coef<'s, 'a>,
    f: Option<UnaryFn>,
}

impl<'s, 'a> Affine<'s, 'a> {
    fn parse(e: &Expr, srcs: &'s [Src<'a>], scalars: &[Scalar]) -> Option<Self> {
        let coef = |e: &Expr| -> Option<Coef<'s, 'a>> {
            match e {
                Expr::Input(i) => match srcs.get(*i)? {
                    Src::F32Strided(data, l) => l.run().map(|_| Coef::Run(data, l)),
                    _ => None,
                },
                Expr::Scalar(k, VType::Float) => {
                    Some(Coef::Const(scalars.get(*k)?.as_f64() as f32))
                }
                _ => None,
            }
        };
        let input = |e: &Expr| match e {
            Expr::Input(i) => match srcs.get(*i)? {
                Src::F32(v) => Some(*v),
                _ => None,
            },
            _ => None,
        };
        // `x * s` (either order), or plain `x` with s = 1.
        let scaled = |e: &Expr| -> Option<(&'a [f32], Coef<'s, 'a>)> {
            if let Some(x) = input(e) {
                return Some((x, Coef::Const(1.0)));
            }
            match e {
                Expr::Binary(BinaryFn::Mul, a, b) => match (input(a), input(b)) {
                    (Some(x), _) => Some((x, coef(b)?)),
                    (_, Some(x)) => Some((x, coef(a)?)),
                    _ => None,
                },
                _ => None,
            }
        };
        let (f, body) = match e {
            Expr::Unary(f, inner) if UN.contains(f) => (Some(*f), &**inner),
            e => (None, e),
        };
        let ((x, s), t) = match body {
            Expr::Binary(BinaryFn::Add, a, b) => match (scaled(a), scaled(b)) {
                (Some(xs), _) if coef(b).is_some() => (xs, coef(b)?),
                (_, Some(xs)) => (xs, coef(a)?),
                _ => return None,
            },
            // No Add: t = -0.0, the exact identity of `+` (x + 0.0 would turn -0.0 into +0.0);
            // likewise s = 1 for no Mul: every form computes what its nodes would.
            e => (scaled(e)?, Coef::Const(-0.0)),
        };
        Some(Affine { x, s, t, f })
    }

    fn eval(&self, lo: usize, dst: &mut [f32]) {
        let pos = self.f.and_then(|f| UN.iter().position(|&u| u == f));
        with_un!(pos, K => self.eval_k::<K>(lo, dst))
    }

    /// [`Self::eval`] with the function `UN[K]` (none for `K == UN.len()`) compiled in.
    fn eval_k<const K: usize>(&self, lo: usize, dst: &mut [f32]) {
        let (mut s, mut t) = (Cursor::new(self.s, lo), Cursor::new(self.t, lo));
        let (end, mut a) = (lo + dst.len(), lo);
        while a < end {
            let b = end.min(a.saturating_add(s.left.min(t.left)));
            let (x, d) = (&self.x[a..b], &mut dst[a - lo..b - lo]);
            let (sv, tv) = (s.value, t.value);
            if K < UN.len() {
                // `un::<K>` applies UN[K] and ignores its first argument.
                d.iter_mut().zip(x).for_each(|(d, &x)| *d = un::<K>(UN[0], x * sv + tv));
            } else {
                d.iter_mut().zip(x).for_each(|(d, &x)| *d = x * sv + tv);
            }
            s.advance(b - a);
            t.advance(b - a);
            a = b;
        }
    }
}

/// Evaluates `e` (for which [`supported`] holds) over elements `lo..lo + dst.len()` into `dst`.
/// The root node writes straight into `dst`.
pub(super) fn eval_chunk(
    e: &Expr,
    srcs: &[Src<'_>],
    scalars: &[Scalar],
    lo: usize,
    dst: &mut [f32],
) {
    if let Some(a) = Affine::parse(e, srcs, scalars) {
        return a.eval(lo, dst);
    }
    let mut pool = Pool(FREE.with_borrow_mut(std::mem::take), dst.len());
    match const_runs(srcs) {
        Some(run) => {
            pool.1 = run.min(dst.len());
            let (end, mut a) = (lo + dst.len(), lo);
            while a < end {
                let b = end.min((a / run + 1) * run);
                let cx = Cx { srcs, scalars, lo: a, n: b - a, runs: true };
                cx.root(e, &mut pool, &mut dst[a - lo..b - lo]);
                a = b;
            }
        }
        None => Cx { srcs, scalars, lo, n: dst.len(), runs: false }.root(e, &mut pool, dst),
    }
    FREE.with_borrow_mut(|f| *f = pool.0);
}

impl Pool {
    fn give(&mut self, v: V<'_>) {
        if let V::O(o) = v {
            self.0.push(o);
        }
    }
}

struct Cx<'s, 'a> {
    srcs: &'s [Src<'a>],
    scalars: &'s [Scalar],
    lo: usize,
    n: usize,
    /// `lo..lo + n` lies inside one run of every broadcast input: read each as a constant.
    runs: bool,
}

/// Unary functions whose loops are compiled per function (the op folds to a constant and the
/// loop vectorizes); others run one loop that matches the op per element.
const UN: [UnaryFn; 7] = {
    use UnaryFn::*;
    [Relu, Neg, Abs, Exp, Sqrt, Sigmoid, Tanh]
};

/// Binary counterpart of [`UN`].
const BIN: [BinaryFn; 6] = {
    use BinaryFn::*;
    [Add, Sub, Mul, Div, Max, Min]
};

/// `f` itself, or for `K` naming an entry of [`UN`] that entry as a compile-time constant.
#[inline(always)]
fn un<const K: usize>(f: UnaryFn, x: f32) -> f32 {
    math::unary_f32(if K < UN.len() { UN[K] } else { f }, x)
}

/// Binary counterpart of [`un`].
#[inline(always)]
fn bin<const K: usize>(f: BinaryFn, x: f32, y: f32) -> f32 {
    math::binary_f32(if K < BIN.len() { BIN[K] } else { f }, x, y)
}

impl<'s, 'a> Cx<'s, 'a> {
    /// Evaluates `e` into `dst` (`n` elements), the root node writing there directly.
    fn root(&self, e: &Expr, pool: &mut Pool, dst: &mut [f32]) {
        match e {
            Expr::Unary(f, inner) => {
                let v = self.eval(inner, pool);
                unary_into(*f, &v, dst);
                pool.give(v);
            }
            Expr::Binary(f, a, b) => {
                let a = self.eval(a, pool);
                let b = self.eval(b, pool);
                binary_into(*f, &a, &b, dst);
                pool.give(a);
                pool.give(b);
            }
            _ => {
                let v = self.eval(e, pool);
                match &v {
                    V::S(s) => dst.copy_from_slice(s),
                    V::O(o) => dst.copy_from_slice(o),
                    V::C(c) => dst.fill(*c),
                }
                pool.give(v);
            }
        }
    }

    fn eval(&self, e: &Expr, pool: &mut Pool) -> V<'s> {
        match e {
            Expr::Input(i) => match &self.srcs[*i] {
                Src::F32(v) => V::S(&v[self.lo..self.lo + self.n]),
                Src::F32Strided(data, l) if self.runs => V::C(l.at(data, self.lo)),
                Src::F32Strided(data, l) => {
                    let mut out = pool.take();
                    l.gather_into(data, self.lo, self.lo + self.n, &mut out);
                    V::O(out)
                }
                // `supported` admits only the two f32 sources.
                Src::Col(_) => V::C(f32::NAN),
            },
            Expr::Scalar(k, _) => {
                V::C(self.scalars.get(*k).copied().unwrap_or(Scalar::I(0)).as_f64() as f32)
            }
            Expr::Cast(_, inner) => self.eval(inner, pool),
            Expr::Unary(f, inner) => unary(*f, self.eval(inner, pool), pool),
            Expr::Binary(f, a, b) => {
                let a = self.eval(a, pool);
                let b = self.eval(b, pool);
                binary(*f, a, b, pool)
            }
            Expr::Select(..) => V::C(f32::NAN),
        }
    }
}

/// `dst = f(v)`.
fn unary_into(f: UnaryFn, v: &V<'_>, dst: &mut [f32]) {
    let x: &[f32] = match v {
        V::C(c) => return dst.fill(math::unary_f32(f, *c)),
        V::S(s) => s,
        V::O(o) => o,
    };
    with_un!(UN.iter().position(|&u| u == f), K => unary_into_k::<K>(f, x, dst))
}

fn unary_into_k<const K: usize>(f: UnaryFn, x: &[f32], dst: &mut [f32]) {
    dst.iter_mut().zip(x).for_each(|(d, &p)| *d = un::<K>(f, p));
}

/// `dst = f(a, b)`.
fn binary_into(f: BinaryFn, a: &V<'_>, b: &V<'_>, dst: &mut [f32]) {
    with_bin!(BIN.iter().position(|&u| u == f), K => binary_into_k::<K>(f, a, b, dst))
}

fn binary_into_k<const K: usize>(f: BinaryFn, a: &V<'_>, b: &V<'_>, dst: &mut [f32]) {
    let g = |p: f32, q: f32| bin::<K>(f, p, q);
    match (a, b) {
        (V::C(x), V::C(y)) => dst.fill(g(*x, *y)),
        (V::C(x), V::S(y)) => dst.iter_mut().zip(*y).for_each(|(d, q)| *d = g(*x, *q)),
        (V::C(x), V::O(y)) => dst.iter_mut().zip(y).for_each(|(d, q)| *d = g(*x, *q)),
        (V::S(x), V::C(y)) => dst.iter_mut().zip(*x).for_each(|(d, p)| *d = g(*p, *y)),
        (V::O(x), V::C(y)) => dst.iter_mut().zip(x).for_each(|(d, p)| *d = g(*p, *y)),
        (a, b) => {
            let x: &[f32] = if let V::S(s) = a {
                s
            } else if let V::O(o) = a {
                o
            } else {
                &[]
            };
            let y: &[f32] = if let V::S(s) = b {
                s
            } else if let V::O(o) = b {
                o
            } else {
                &[]
            };
            dst.iter_mut().zip(x.iter().zip(y)).for_each(|(d, (p, q))| *d = g(*p, *q));
        }
    }
}

fn unary<'s>(f: UnaryFn, v: V<'s>, pool: &mut Pool) -> V<'s> {
    with_un!(UN.iter().position(|&u| u == f), K => unary_k::<K>(f, v, pool))
}

fn unary_k<'s, const K: usize>(f: UnaryFn, v: V<'s>, pool: &mut Pool) -> V<'s> {
    match v {
        V::C(c) => V::C(un::<K>(f, c)),
        V::O(mut x) => {
            x.iter_mut().for_each(|p| *p = un::<K>(f, *p));
            V::O(x)
        }
        V::S(s) => {
            let mut x = pool.take();
            x.extend(s.iter().map(|&p| un::<K>(f, p)));
            V::O(x)
        }
    }
}

fn binary<'s>(f: BinaryFn, a: V<'s>, b: V<'s>, pool: &mut Pool) -> V<'s> {
    with_bin!(BIN.iter().position(|&u| u == f), K => binary_k::<K>(f, a, b, pool))
}

fn binary_k<'s, const K: usize>(f: BinaryFn, a: V<'s>, b: V<'s>, pool: &mut Pool) -> V<'s> {
    let g = |p: f32, q: f32| bin::<K>(f, p, q);
    match (a, b) {
        (V::C(x), V::C(y)) => V::C(g(x, y)),
        (V::O(mut x), b) => {
            match &b {
                V::C(y) => x.iter_mut().for_each(|p| *p = g(*p, *y)),
                V::S(y) => x.iter_mut().zip(y.iter()).for_each(|(p, q)| *p = g(*p, *q)),
                V::O(y) => x.iter_mut().zip(y.iter()).for_each(|(p, q)| *p = g(*p, *q)),
            }
            if let V::O(y) = b {
                pool.0.push(y);
            }
            V::O(x)
        }
        (a, V::O(mut y)) => {
            match a {
                V::C(x) => y.iter_mut().for_each(|q| *q = g(x, *q)),
                V::S(x) => y.iter_mut().zip(x.iter()).for_each(|(q, p)| *q = g(*p, *q)),
                V::O(_) => unreachable!("handled by the arm above"),
            }
            V::O(y)
        }
        (a, b) => {
            let mut out = pool.take();
            match (a, b) {
                (V::S(x), V::S(y)) => out.extend(x.iter().zip(y.iter()).map(|(p, q)| g(*p, *q))),
                (V::S(x), V::C(y)) => out.extend(x.iter().map(|p| g(*p, y))),
                (V::C(x), V::S(y)) => out.extend(y.iter().map(|q| g(x, *q))),
                _ => unreachable!("owned and constant pairs are handled above"),
            }
            V::O(out)
        }
    }
}
