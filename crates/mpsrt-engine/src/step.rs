//! One step of a run with the plan's run-time rewrites (issue 22): concat groups written in
//! place (`concat_inplace.rs`) and steps folded into the conv that reads them
//! (`gate_fold.rs`), depthwise convs computing the pool of their output (`dw_pool.rs`). The
//! session's step loops (`session.rs`, the capture in `replay.rs`) call
//! [`Session::run_step_at`] for every step.

use crate::concat_inplace::ConcatRun;
use crate::ops::Ctx;
use crate::session::{PlanState, Session};
use crate::value::to_device;
use mpsrt_core::{DType, Result};
use mpsrt_graph::{Step, ValueId};
use mpsrt_tensor::Tensor;

impl Session {
    /// Step `s` of a run. A folded gate `Mul` does nothing and the conv after it reads `x`
    /// with the gate as an input scale (`gate_fold.rs`); with `groups`, the plan's concat
    /// groups apply (`concat_inplace.rs`): groups made before the step, its parts placed
    /// (`direct`: the producer may write into its slice), an absorbed concat replaced by its
    /// view. `live`: the op runs with the device's capture suspended (a recording's live step).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_step_at(
        &self,
        ctx: &Ctx<'_>,
        st: &PlanState,
        s: usize,
        get: &dyn Fn(ValueId) -> Result<Tensor>,
        groups: Option<&mut ConcatRun>,
        direct: bool,
        live: Option<&mpsrt_runtime::GpuDevice>,
    ) -> Result<Vec<(ValueId, Tensor)>> {
        let gates = st.gates.as_ref();
        if gates.is_some_and(|f| f.skips(s)) || st.dw_pools.as_ref().is_some_and(|d| d.skips(s)) {
            return Ok(Vec::new());
        }
        let folded = gates.and_then(|f| f.at(s));
        let get2 = |v: ValueId| match folded {
            Some(f) if v == f.m => get(f.x),
            _ => get(v),
        };
        let mut exec = || {
            let paused = live.map(|d| (d, d.suspend_capture()));
            let outs = self.run_folded(ctx, st, s, folded, &get2, get);
            if let Some((d, p)) = paused {
                d.resume_capture(p);
            }
            outs
        };
        match (&st.concat, groups) {
            (Some(cp), Some(g)) => cp.run_step(s, g, self.place(), &get2, direct, &mut exec),
            _ => exec(),
        }
    }

    /// `step`, and where it is a conv reading a folded gate product `(m, x, gate)`, with the
    /// gate as its input scale (the product computed first if no conv kernel took it).
    fn run_folded(
        &self,
        ctx: &Ctx<'_>,
        st: &PlanState,
        s: usize,
        folded: Option<crate::gate_fold::Folded>,
        get2: &dyn Fn(ValueId) -> Result<Tensor>,
        get: &dyn Fn(ValueId) -> Result<Tensor>,
    ) -> Result<Vec<(ValueId, Tensor)>> {
        use crate::gate_fold::InputFold;
        let step = &ctx.plan.steps[s];
        if let Some(pair) = st.gates.as_ref().and_then(|g| g.se_at(s)) {
            return self.run_se_gate(ctx, pair, step, get);
        }
        if let Some(pair) = st.dw_pools.as_ref().and_then(|d| d.at(s)) {
            return self.run_dw_pool(ctx, st, pair, step, get);
        }
        let Some(f) = folded else {
            return self.run_step(ctx, step, &mut |v| get2(v));
        };
        let dev = |v| to_device("conv", &get(v)?, DType::F32, self.place());
        let run = || {
            let r = self.run_step(ctx, step, &mut |v| get2(v));
            (r, mpsrt_tensor::input_scale_pending())
        };
        let (outs, pending) = match f.op {
            InputFold::Gate(gate) => mpsrt_tensor::with_conv_input_scale(&dev(gate)?, run),
            InputFold::AffineRelu(scale, shift) => {
                mpsrt_tensor::with_conv_input_affine_relu(&dev(scale)?, &dev(shift)?, run)
            }
        };
        if !pending {
            return outs;
        }
        // No conv took it: the folded step after all (the unfolded plan's own kernel).
        drop(outs);
        if let Some(g) = &st.gates {
            g.fell_back();
        }
        let first = self.run_step(ctx, &ctx.plan.steps[f.step], &mut |v| get(v))?;
        self.run_step(ctx, step, &mut |v| match first.iter().find(|(u, _)| *u == v) {
            Some((_, t)) => Ok(t.clone()),
            None => get(v),
        })
    }

    /// A squeeze-excitation gate's two convs as one dispatch (`gate_fold.rs`), or as their
    /// two steps where the fused kernel does not take them.
    fn run_se_gate(
        &self,
        ctx: &Ctx<'_>,
        pair: crate::gate_fold::SePair,
        step: &Step,
        get: &dyn Fn(ValueId) -> Result<Tensor>,
    ) -> Result<Vec<(ValueId, Tensor)>> {
        let act = |a: Option<usize>| match a {
            None => Some(None),
            Some(i) => crate::nn::epilogue_activation(&ctx.plan.graph.nodes[i]).map(Some),
        };
        if let (Some(a1), Some(a2)) = (act(pair.act1), act(pair.act2)) {
            let dev = |v| to_device("se_gate", &get(v)?, DType::F32, self.place());
            let (x, w1, b1, w2, b2) =
                (dev(pair.x)?, dev(pair.w1)?, dev(pair.b1)?, dev(pair.w2)?, dev(pair.b2)?);
            if let Some(y) = mpsrt_tensor::se_gate(&x, (&w1, &b1, a1), (&w2, &b2, a2))? {
                return Ok(vec![(pair.out, y)]);
            }
        }
        // The two steps after all: the first's output feeds the second.
        let first = self.run_step(ctx, &ctx.plan.steps[pair.first], &mut |v| get(v))?;
        self.run_step(ctx, step, &mut |v| match first.iter().find(|(u, _)| *u == v) {
            Some((_, t)) => Ok(t.clone()),
            None => get(v),
        })
    }

    /// A depthwise conv that also computes the pool of its output (`dw_pool.rs`), or the
    /// conv's and the pool's steps where the fused kernel does not take the operands.
    fn run_dw_pool(
        &self,
        ctx: &Ctx<'_>,
        st: &PlanState,
        pair: crate::dw_pool::DwPool,
        step: &Step,
        get: &dyn Fn(ValueId) -> Result<Tensor>,
    ) -> Result<Vec<(ValueId, Tensor)>> {
        let nodes = &ctx.plan.graph.nodes;
        let node = &nodes[pair.conv];
        let act = match pair.act {
            None => Some(None),
            Some(i) => crate::nn::epilogue_activation(&nodes[i]).map(Some),
        };
        if let (mpsrt_graph::Op::Conv(a), Some(act)) = (&node.op, act) {
            let dev = |v| to_device("conv", &get(v)?, DType::F32, self.place());
            let (x, w) = (dev(node.inputs[0])?, dev(node.inputs[1])?);
            let b = node.inputs.get(2).map(|&v| dev(v)).transpose()?;
            let (stride, pads, dilation) = crate::dw_pool::geometry(a);
            let ys = ctx.plan.shape(pair.y);
            let out = [ys[2], ys[3]];
            let fused = mpsrt_tensor::depthwise_conv_pool(
                &x,
                &w,
                b.as_ref(),
                stride,
                pads,
                dilation,
                out,
                act,
            )
            .map_err(|e| ctx.wrap(node, e))?;
            if let Some((y, p)) = fused {
                return Ok(vec![(pair.y, y), (pair.pooled, p)]);
            }
        }
        if let Some(d) = &st.dw_pools {
            d.fell_back();
        }
        let first = self.run_step(ctx, step, &mut |v| get(v))?;
        let pool = &ctx.plan.steps[pair.pool_step];
        let second =
            self.run_step(ctx, pool, &mut |v| match first.iter().find(|(u, _)| *u == v) {
                Some((_, t)) => Ok(t.clone()),
                None => get(v),
            })?;
        Ok(first.into_iter().chain(second).collect())
    }
}
