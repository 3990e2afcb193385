//! Structured control flow of the TTIR lowering: `scf.for` becomes a WGSL loop and `scf.if` a
//! WGSL `if`, with `var`s declared for their carried values (iter_args, `if` results) and
//! assigned at each `scf.yield`. Split from `lower.rs`, which lowers the other ops.

use super::lower::{TtirLowerer, V};
use super::parse::{self, Elem, Op};
use crate::value::{Tensor, Ty};
use mpsrt_core::{DType, Result};

impl TtirLowerer {
    /// Declares `var`s holding carried values (loop iter_args or `if` results).
    fn declare(&mut self, tys: &[Ty], shapes: &[Vec<usize>]) -> Vec<Tensor> {
        let mut out = Vec::new();
        for (ty, shape) in tys.iter().zip(shapes) {
            let name = self.em.fresh("v");
            let wt = if shape.is_empty() {
                ty.wgsl().to_string()
            } else {
                self.em.max_numel = self.em.max_numel.max(shape.iter().product());
                format!("array<{}, {}>", ty.wgsl(), self.em.regs(shape.iter().product()))
            };
            self.em.line(format!("var {name}: {wt};"));
            out.push(Tensor { expr: name, ty: *ty, shape: shape.clone() });
        }
        out
    }

    /// `var = value` for every carried var. Values that read a var assigned earlier in the same
    /// group (a swap of loop-carried values) are copied out first.
    fn assign(&mut self, vars: &[Tensor], vals: &[V]) -> Result<()> {
        if vars.len() != vals.len() {
            return Err(self.err(format!("yields {} values for {}", vals.len(), vars.len())));
        }
        let mut srcs: Vec<V> = vals.to_vec();
        for k in 0..vars.len() {
            let reads_earlier = vars[..k].iter().any(|w| mentions(&srcs[k].view().expr, &w.expr));
            if reads_earlier {
                let c = self.em.fresh("c");
                self.em.line(format!("let {c} = {};", srcs[k].view().expr));
                let t = Tensor { expr: c, ..srcs[k].view().clone() };
                srcs[k] = match &srcs[k] {
                    V::T(_) => V::T(t),
                    V::Splat(_, s) => V::Splat(t, s.clone()),
                };
            }
        }
        for (var, v) in vars.iter().zip(&srcs) {
            if var.ty != v.ty() {
                return Err(self.err(format!(
                    "carried value changes type from {} to {}",
                    var.ty.describe(),
                    v.ty().describe()
                )));
            }
            match v {
                V::T(t) if t.expr == var.expr => {}
                V::T(t) if t.shape == var.shape || !t.is_block() && !var.is_block() => {
                    self.em.line(format!("{} = {};", var.expr, t.expr));
                }
                _ => {
                    let (lhs, rhs) = (var.at("i"), v.view().at("i"));
                    self.em.for_each(var.numel(), |em| em.line(format!("{lhs} = {rhs};")));
                }
            }
        }
        Ok(())
    }

    pub(super) fn for_op(&mut self, op: &Op) -> Result<Vec<V>> {
        let words: Vec<&str> = op.body.split_whitespace().collect();
        if words.len() < 7 || words[1] != "=" || words[3] != "to" || words[5] != "step" {
            return Err(self.err("cannot read the loop header"));
        }
        let (iv, lb, ub, st) =
            (words[0], self.get(words[2])?, self.get(words[4])?, self.get(words[6])?);
        let mut inits = Vec::new();
        let mut names = Vec::new();
        if let Some(i) = op.body.find("iter_args(") {
            let open = i + "iter_args".len();
            let close = parse::matching(&op.body, open).ok_or_else(|| self.err("iter_args"))?;
            for pair in parse::split_top(&op.body[open + 1..close], ',') {
                let (n, v) = pair.split_once('=').ok_or_else(|| self.err("iter_args"))?;
                names.push(n.trim().to_string());
                inits.push(self.get(v.trim())?);
            }
        }
        // Matmul accumulators may stay in cooperative matrices for the whole loop (`coop_acc`);
        // the other carried values are `var`s.
        let coop = self.coop_candidates(op, &names, &inits);
        // Pointer blocks advanced by a uniform step: a template plus a scalar offset (`dot_stage`).
        let mut carried = self.carried_pointers(op, &names, &inits);
        for (c, k) in carried.iter_mut().zip(&coop) {
            if k.is_some() {
                *c = None;
            }
        }
        let special: Vec<bool> =
            coop.iter().zip(&carried).map(|(a, b)| a.is_some() || b.is_some()).collect();
        let mut vars = Vec::new();
        for ((cand, init), step) in coop.iter().zip(&inits).zip(&carried) {
            vars.push(match (cand, step) {
                (Some(c), _) => self.coop_acc_begin(c.clone(), init),
                (None, Some(_)) => {
                    let off = self.em.fresh("off");
                    self.em.line(format!("var {off}: i32 = 0i;"));
                    Tensor::scalar(off, Ty::D(DType::I32))
                }
                (None, None) => self.declare(&[init.ty()], &[init.shape().to_vec()]).remove(0),
            });
        }
        let (plain_vars, plain_inits) = (plain(&vars, &special), plain(&inits, &special));
        self.assign(&plain_vars, &plain_inits)?;
        let mut piped = self.pipeline_plan(op, iv, &names);
        self.pipeline_prologue(op, iv, &lb, &mut piped)?;
        let lv = self.em.fresh("iv");
        let (lb, ub, st) = (lb.view().expr.clone(), ub.view().expr.clone(), st.view().expr.clone());
        self.loop_marks.push(self.em.mark());
        self.em.open(format!("for (var {lv}: i32 = {lb}; {lv} < {ub}; {lv} += {st})"));
        self.vals.insert(iv.to_string(), V::T(Tensor::scalar(lv.clone(), Ty::D(DType::I32))));
        for ((n, v), (step, init)) in names.iter().zip(&vars).zip(carried.iter().zip(&inits)) {
            let v = match step {
                Some(x) => self.carried_block(init.view(), &v.expr, Some((op, x.as_str()))),
                None => v.clone(),
            };
            self.vals.insert(n.clone(), V::T(v));
        }
        self.pipeline_top(op, iv, &lv, &st, &piped)?;
        let body = op.regions.first().ok_or_else(|| self.err("scf.for without a body"))?;
        self.nesting += 1;
        let yielded = self.block(&body.ops)?;
        self.nesting -= 1;
        self.set_op(op);
        if yielded.len() != vars.len() {
            return Err(self.err(format!("yields {} values for {}", yielded.len(), vars.len())));
        }
        self.assign(&plain_vars, &plain(&yielded, &special))?;
        for (var, step) in vars.iter().zip(&carried) {
            if let Some(x) = step {
                let x = self.get(x)?.view().expr.clone();
                self.em.line(format!("{0} = {0} + {x};", var.expr));
            }
        }
        self.em.close();
        self.loop_marks.pop();
        let mut out = Vec::new();
        for ((var, cand), (step, init)) in
            vars.into_iter().zip(&coop).zip(carried.iter().zip(&inits))
        {
            out.push(V::T(match (cand, step) {
                (Some(_), _) => self.coop_acc_end(&var),
                (None, Some(_)) => self.carried_block(init.view(), &var.expr, None),
                (None, None) => var,
            }));
        }
        Ok(out)
    }

    pub(super) fn if_op(&mut self, op: &Op, ops: &[String]) -> Result<Vec<V>> {
        let c = self.get(ops.first().ok_or_else(|| self.err("scf.if without a condition"))?)?;
        if !c.is_uniform() {
            return Err(self.err("scf.if needs a scalar condition"));
        }
        let mut tys = Vec::new();
        let mut shapes = Vec::new();
        if let Some(i) = op.body.find("->") {
            let list = op.body[i + 2..].trim().trim_start_matches('(').trim_end_matches(')');
            for t in parse::split_top(list, ',') {
                let t = parse::parse_type(t).map_err(|e| self.err(e.to_string()))?;
                if matches!(t.elem, Elem::Ptr(_)) {
                    return Err(self.err("scf.if yielding pointers is not supported"));
                }
                tys.push(self.ty_of(&t, None)?);
                shapes.push(t.shape);
            }
        }
        let vars = self.declare(&tys, &shapes);
        self.em.open(format!("if ({})", c.view().expr));
        self.nesting += 1;
        for (k, r) in op.regions.iter().enumerate() {
            if k == 1 {
                self.em.else_();
            }
            let y = self.block(&r.ops)?;
            self.set_op(op);
            if !vars.is_empty() {
                self.assign(&vars, &y)?;
            }
        }
        self.nesting -= 1;
        self.em.close();
        Ok(vars.into_iter().map(V::T).collect())
    }

    pub(super) fn set_op(&mut self, op: &Op) {
        self.op_name.clone_from(&op.name);
        self.loc.clone_from(&op.loc);
        self.line = op.line;
    }
}

/// The entries of `xs` whose carried value is a plain `var` (not a cooperative-matrix
/// accumulator or a carried pointer offset).
fn plain<T: Clone>(xs: &[T], special: &[bool]) -> Vec<T> {
    xs.iter().zip(special).filter(|(_, s)| !**s).map(|(x, _)| x.clone()).collect()
}

/// Whether WGSL expression `e` reads the variable `var` (a whole identifier).
fn mentions(e: &str, var: &str) -> bool {
    e.match_indices(var).any(|(i, _)| {
        let before = e[..i].chars().next_back();
        let after = e[i + var.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}
