//! Probe: where the row-sum bandwidth goes. Times, on GPU 0, 8192 × 8192 f32 row sums by the
//! production kernel (`mt::sum`) and by hand-written candidates — one subgroup per row
//! (`subgroupAdd`, no barriers), one workgroup per row reduced through subgroups (one barrier),
//! and a pure read of the same bytes (the bandwidth ceiling) — each checked against the
//! production result. One JSON object per line.
//! Run: `cargo run --release -p mpsrt-tensor --example probe_reduce [-- ROWS COLS ITERS]`.

use mpsrt_runtime::{Binding, GpuDevice, Kernel, Storage};
use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};
use std::time::Instant;

const COMMON: &str = "
@group(0) @binding(0) var<storage, read> inp: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> M: vec4<u32>; // rows, vec4s per row
";

/// One subgroup per row: lanes stride the row in vec4s, 4 independent accumulators.
const SG_ROW: &str = "
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_id) sid: u32,
        @builtin(num_subgroups) nsg: u32, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) sgs: u32) {
  let row = wid.x * nsg + sid;
  if (row >= M.x) { return; }
  let n = M.y; let base = row * n;
  var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
  var i = lane;
  let step = sgs * 4u;
  for (; i + 3u * sgs < n; i += step) {
    let x0 = inp[base + i]; let x1 = inp[base + i + sgs]; let x2 = inp[base + i + 2u * sgs]; let x3 = inp[base + i + 3u * sgs];
    a0 += x0; a1 += x1; a2 += x2; a3 += x3;
  }
  for (; i < n; i += sgs) { a0 += inp[base + i]; }
  let v = (a0 + a1) + (a2 + a3);
  let s = subgroupAdd(v.x + v.y + v.z + v.w);
  if (lane == 0u) { out[row] = s; }
}
";

/// One workgroup (256) per row; per-thread loads all issued first (8 vec4 for 8192 floats),
/// then subgroupAdd and one barrier over the per-subgroup partials.
const WG_ROW_SG: &str = "
var<workgroup> part: array<f32, 64>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32,
        @builtin(subgroup_id) sid: u32, @builtin(num_subgroups) nsg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
  let row = wid.x;
  let n = M.y; let base = row * n;
  var acc = vec4<f32>(0.0);
  for (var i = tid; i < n; i += 256u) { acc += inp[base + i]; }
  let s = subgroupAdd(acc.x + acc.y + acc.z + acc.w);
  if (lane == 0u) { part[sid] = s; }
  workgroupBarrier();
  if (tid == 0u) {
    var t = 0.0;
    for (var j = 0u; j < nsg; j++) { t += part[j]; }
    out[row] = t;
  }
}
";

/// 64 threads per row, 4 rows per workgroup, tree in workgroup memory (no subgroups).
const WG64_ROW: &str = "
var<workgroup> red: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
  let r = tid >> 6u; let t = tid & 63u;
  let row = wid.x * 4u + r;
  let n = M.y;
  var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0);
  if (row < M.x) {
    let base = row * n;
    var i = t;
    for (; i + 64u < n; i += 128u) { a0 += inp[base + i]; a1 += inp[base + i + 64u]; }
    for (; i < n; i += 64u) { a0 += inp[base + i]; }
  }
  let v = a0 + a1;
  red[tid] = v.x + v.y + v.z + v.w;
  workgroupBarrier();
  for (var st = 32u; st > 0u; st = st >> 1u) {
    if (t < st) { red[tid] += red[tid + st]; }
    workgroupBarrier();
  }
  if (t == 0u && row < M.x) { out[row] = red[tid]; }
}
";

/// The bandwidth ceiling: every thread reads a grid-strided share of the whole matrix.
const READ_ALL: &str = "
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let total = M.x * M.y; let stride = nwg.x * 256u;
  var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0);
  var i = gid.x;
  for (; i + stride < total; i += 2u * stride) { a0 += inp[i]; a1 += inp[i + stride]; }
  if (i < total) { a0 += inp[i]; }
  let v = a0 + a1;
  out[gid.x] = v.x + v.y + v.z + v.w;
}
";

fn time(iters: usize, dev: &GpuDevice, f: &dyn Fn() -> Result<()>) -> Result<f64> {
    for _ in 0..5 {
        f()?;
    }
    dev.synchronize()?;
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
    Ok(t0.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

fn buf(t: &Tensor) -> &mpsrt_runtime::GpuBuffer {
    match t.storage() {
        Storage::Gpu(b) => b,
        Storage::Cpu(_) => unreachable!("GPU tensor"),
    }
}

fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (rows, cols, iters) = (
        *args.first().unwrap_or(&8192),
        *args.get(1).unwrap_or(&8192),
        *args.get(2).unwrap_or(&200),
    );
    let p = Place::Gpu(0);
    let dev = mpsrt_runtime::gpu_device(0)?;
    let x = mt::randn(&[rows, cols], DType::F32, p)?;
    let bytes = (rows * cols * 4) as f64;
    let reference = mt::sum(&x, Some(&[-1]), false)?.to_vec::<f32>()?;
    let ms = time(iters, &dev, &|| mt::sum(&x, Some(&[-1]), false).map(drop))?;
    println!("{{\"probe\": \"production_sum\", \"rows\": {rows}, \"cols\": {cols}, \"ms\": {ms:.4}, \"gbps\": {:.1}}}", bytes / ms / 1e6);
    let meta: [u32; 4] = [rows as u32, (cols / 4) as u32, 0, 0];
    let sg = dev.properties().subgroup_max_size.max(1) as usize;
    let cases: [(&str, &str, usize, usize); 4] = [
        ("subgroup_per_row", SG_ROW, rows.div_ceil(256 / sg.min(256)), rows),
        ("workgroup_per_row_subgroup_reduce", WG_ROW_SG, rows, rows),
        ("wg64_per_row_tree", WG64_ROW, rows.div_ceil(4), rows),
        ("read_ceiling", READ_ALL, 132 * 16, 132 * 16 * 256),
    ];
    for (name, body, wgs, outs) in cases {
        let src = format!("{COMMON}{body}");
        let pl = match dev.pipeline(Kernel { source: &src, entry: "main" }) {
            Ok(pl) => pl,
            Err(e) => {
                println!("{{\"probe\": \"{name}\", \"error\": {:?}}}", e.to_string());
                continue;
            }
        };
        let y = mt::zeros(&[outs], DType::F32, p)?;
        let run = || {
            dev.dispatch(
                name,
                &pl,
                &[Binding::from(buf(&x)), Binding::from(buf(&y))],
                bytemuck::cast_slice(&meta),
                [wgs as u32, 1, 1],
            )
        };
        run()?;
        let got = y.to_vec::<f32>()?;
        let err = if outs == rows {
            got.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max)
        } else {
            0.0
        };
        let ms = time(iters, &dev, &|| run())?;
        println!("{{\"probe\": \"{name}\", \"rows\": {rows}, \"cols\": {cols}, \"ms\": {ms:.4}, \"gbps\": {:.1}, \"max_abs_err\": {err}}}", bytes / ms / 1e6);
    }
    Ok(())
}
