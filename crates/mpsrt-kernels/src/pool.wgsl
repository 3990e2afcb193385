// 2-D pooling over NCHW (f32 storage; f16 tensors are widened by the caller).
//
// pool2d — one thread per output element, scanning its window straight from global memory
//   (windows overlap little, so workgroup staging would not pay); adjacent threads own adjacent
//   output columns, so loads and stores are coalesced. Covers max (NaN-propagating, tested on
//   bits because WGSL may assume finite floats), avg (PyTorch's divisor rules for padding,
//   ceil_mode and count_include_pad) and adaptive avg/max (PyTorch's floor/ceil start/end
//   indices); global pooling is adaptive pooling to 1×1.
//
// Meta words: 0 NC, 1 H, 2 W, 3 OH, 4 OW, 5 KH, 6 KW, 7 SH, 8 SW, 9 PH, 10 PW, 11 DH, 12 DW,
// 13 mode (0 max, 1 avg), 14 count_include_pad, 15 adaptive, 16 x_off, 17 total,
// 18 grid row width in threads, 19 first output row of this dispatch, 20 output rows per plane
// in this dispatch (a plane larger than one storage binding is pooled a band of rows at a time;
// x_off may then wrap below zero: u32 arithmetic wraps, so the index lands in the bound window),
// 21 with_index: max pooling also writes the flat `h·W + w` index of each maximum (first one;
// the first NaN where a window holds NaN) as i32 bits at Y[total + idx] (Paddle's return_mask).

struct Meta { w: array<vec4<u32>, 6> };

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> M: Meta;

fn mv(i: u32) -> u32 {
    return M.w[i >> 2u][i & 3u];
}

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(256)
fn pool2d(@builtin(global_invocation_id) gid: vec3<u32>) {
    let idx = gid.x + gid.y * mv(18u);
    if (idx >= mv(17u)) { return; }
    let H = i32(mv(1u)); let W = i32(mv(2u)); let OH = mv(3u); let OW = mv(4u);
    let KH = i32(mv(5u)); let KW = i32(mv(6u));
    let SH = i32(mv(7u)); let SW = i32(mv(8u)); let PH = i32(mv(9u)); let PW = i32(mv(10u));
    let DH = i32(mv(11u)); let DW = i32(mv(12u));
    let is_max = mv(13u) == 0u;
    let OHC = mv(20u);
    let ow = idx % OW;
    let oh = (idx / OW) % OHC + mv(19u);
    let nc = idx / (OW * OHC);
    let base = mv(16u) + nc * u32(H * W);

    var h0: i32; var h1: i32; var w0: i32; var w1: i32; var dh = DH; var dw = DW;
    var divisor = 1.0;
    if (mv(15u) != 0u) {
        h0 = i32((oh * u32(H)) / OH);
        h1 = i32(((oh + 1u) * u32(H) + OH - 1u) / OH);
        w0 = i32((ow * u32(W)) / OW);
        w1 = i32(((ow + 1u) * u32(W) + OW - 1u) / OW);
        dh = 1; dw = 1;
        divisor = f32((h1 - h0) * (w1 - w0));
    } else if (is_max) {
        h0 = i32(oh) * SH - PH;
        w0 = i32(ow) * SW - PW;
        h1 = h0 + (KH - 1) * DH + 1;
        w1 = w0 + (KW - 1) * DW + 1;
    } else {
        h0 = i32(oh) * SH - PH;
        w0 = i32(ow) * SW - PW;
        h1 = min(h0 + KH, H + PH);
        w1 = min(w0 + KW, W + PW);
        let padded = (h1 - h0) * (w1 - w0);
        h0 = max(h0, 0); w0 = max(w0, 0);
        h1 = min(h1, H); w1 = min(w1, W);
        if (mv(14u) != 0u) {
            divisor = f32(padded);
        } else {
            divisor = f32((h1 - h0) * (w1 - w0));
        }
    }

    var best = bitcast<f32>(0xff800000u); // -inf
    var sum = 0.0;
    var nan = false;
    var bidx = -1;
    for (var h = h0; h < h1; h += dh) {
        if (h < 0 || h >= H) { continue; }
        for (var w = w0; w < w1; w += dw) {
            if (w < 0 || w >= W) { continue; }
            let v = X[base + u32(h * W + w)];
            let vnan = is_nan(v);
            if (bidx < 0 || (!nan && (vnan || v > best))) { bidx = h * W + w; }
            if (vnan) { nan = true; }
            best = max(best, v);
            sum += v;
        }
    }
    var r: f32;
    if (is_max) {
        r = best;
        if (nan) { r = bitcast<f32>(0x7fc00000u); }
    } else {
        r = sum / divisor;
    }
    Y[idx] = r;
    if (mv(21u) != 0u) {
        Y[mv(17u) + idx] = bitcast<f32>(bidx);
    }
}
