// Convolution kernels (f32 storage, f32 accumulation; f16 tensors are widened by the caller).
//
// conv_gemm — implicit GEMM: M = N·OH·OW output pixels, N = OC/groups channels,
//   K = IC/groups·KH·KW. Techniques: 64×64×16 block tiles (128×128×8 with 8×8 register tiles
//   for large problems, rendered from the same text) staged through `var<workgroup>`
//   memory (input patches gathered on the fly, im2col never materialised), 4×4 (8×8) register
//   tiling per thread, per-thread pixel decode hoisted out of the K loop, coalesced
//   loads (pixels adjacent along the M tile, weights adjacent along K) and coalesced NCHW
//   stores (adjacent threads write adjacent pixels). Groups run on grid z. 1×1 stride-1 convs
//   take the same kernel and degenerate to a plain GEMM (no patch arithmetic hits padding).
// conv_direct — one thread per output element, loops over its receptive field. Used for
//   depthwise convs (IC/groups = 1, where a GEMM tile would be 1/64 busy) and as the fallback.
// conv_transpose_direct — gather form of the transposed conv: one thread per output element
//   visits the input pixels whose stride grid lands on it (no atomics, no scatter).
//
// Meta words: 0 N, 1 C, 2 H, 3 W, 4 OC, 5 OH, 6 OW, 7 KH, 8 KW, 9 SH, 10 SW, 11 PH (top),
// 12 PW (left), 13 DH, 14 DW, 15 groups, 16 has_bias, 17 x_off, 18 w_off, 19 b_off,
// 20 total outputs, 21 grid row width in threads (for 2-D grids of the direct kernels),
// 22 conv_direct's fused activation (0 none, then MatmulAct's order: 1 Relu, 2 LeakyRelu,
// 3 Clip, 4 HardSigmoid, 5 HardSwish, 6 Sigmoid, 7 Silu), 23/24 its parameters (f32 bits).

struct Meta { w: array<vec4<u32>, 7> };

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> Wt: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<uniform> M: Meta;

fn mv(i: u32) -> u32 {
    return M.w[i >> 2u][i & 3u];
}

// Tile shape (the launcher renders a 128×128×8 variant with 8×8 register tiles for large
// problems by replacing these five lines). 256 threads = 16×16, each owning TM×TN outputs.
const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const TM: u32 = 4u;
const TN: u32 = 4u;

var<workgroup> As: array<f32, BK * BM>; // [BK][BM]
var<workgroup> Bs: array<f32, BK * BN>; // [BK][BN]

@compute @workgroup_size(256)
fn conv_gemm(
    @builtin(local_invocation_index) t: u32,
    @builtin(workgroup_id) wg: vec3<u32>,
) {
    let n_batch = mv(0u); let C = mv(1u); let H = mv(2u); let W = mv(3u);
    let OC = mv(4u); let OH = mv(5u); let OW = mv(6u); let KH = mv(7u); let KW = mv(8u);
    let SH = i32(mv(9u)); let SW = i32(mv(10u)); let PH = i32(mv(11u)); let PW = i32(mv(12u));
    let DH = i32(mv(13u)); let DW = i32(mv(14u)); let G = mv(15u);
    let x_off = mv(17u); let w_off = mv(18u);
    let ICg = C / G;
    let OCg = OC / G;
    let KHW = KH * KW;
    let K = ICg * KHW;
    let P = OH * OW;
    let Mtot = n_batch * P;
    let g = wg.z;
    let m0 = wg.x * BM;
    let n0 = wg.y * BN;

    // The pixel this thread loads for A: fixed over the whole K loop.
    let la_m = t % BM;
    let la_k = t / BM;
    let am = m0 + la_m;
    let a_valid = am < Mtot;
    let a_n = am / P;
    let a_p = am % P;
    let a_ih0 = i32(a_p / OW) * SH - PH;
    let a_iw0 = i32(a_p % OW) * SW - PW;
    let a_base = x_off + (a_n * C + g * ICg) * H * W;

    // The weights this thread loads for B: k = t % BK, channels t / BK + (256 / BK)·j.
    let lb_k = t % BK;
    let lb_n = t / BK;

    let tx = t % 16u;
    let ty = t / 16u;
    var acc: array<f32, TM * TN>;
    for (var i = 0u; i < TM * TN; i++) { acc[i] = 0.0; }

    for (var k0 = 0u; k0 < K; k0 += BK) {
        for (var j = 0u; j < BK * BM / 256u; j++) {
            let kk = la_k + (256u / BM) * j;
            let k = k0 + kk;
            var v = 0.0;
            if (a_valid && k < K) {
                let ic = k / KHW;
                let r = k % KHW;
                let ih = a_ih0 + i32(r / KW) * DH;
                let iw = a_iw0 + i32(r % KW) * DW;
                if (ih >= 0 && ih < i32(H) && iw >= 0 && iw < i32(W)) {
                    v = X[a_base + ic * H * W + u32(ih) * W + u32(iw)];
                }
            }
            As[kk * BM + la_m] = v;
        }
        for (var j = 0u; j < BK * BN / 256u; j++) {
            let nn = lb_n + (256u / BK) * j;
            let oc = n0 + nn;
            let k = k0 + lb_k;
            var v = 0.0;
            if (oc < OCg && k < K) {
                v = Wt[w_off + (g * OCg + oc) * K + k];
            }
            Bs[lb_k * BN + nn] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<f32, TM>;
            var b: array<f32, TN>;
            for (var i = 0u; i < TM; i++) { a[i] = As[kk * BM + tx + 16u * i]; }
            for (var j = 0u; j < TN; j++) { b[j] = Bs[kk * BN + ty + 16u * j]; }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) {
                    acc[i * TN + j] = fma(a[i], b[j], acc[i * TN + j]);
                }
            }
        }
        workgroupBarrier();
    }

    let has_bias = mv(16u) != 0u;
    let b_off = mv(19u);
    for (var j = 0u; j < TN; j++) {
        let oc = n0 + ty + 16u * j;
        if (oc >= OCg) { continue; }
        let c = g * OCg + oc;
        var bias = 0.0;
        if (has_bias) { bias = B[b_off + c]; }
        for (var i = 0u; i < TM; i++) {
            let m = m0 + tx + 16u * i;
            if (m < Mtot) {
                let n = m / P;
                let p = m % P;
                Y[(n * OC + c) * P + p] = acc[i * TN + j] + bias;
            }
        }
    }
}

@compute @workgroup_size(256)
fn conv_direct(
    @builtin(global_invocation_id) gid: vec3<u32>,
) {
    let idx = gid.x + gid.y * mv(21u);
    if (idx >= mv(20u)) { return; }
    let C = mv(1u); let H = mv(2u); let W = mv(3u);
    let OC = mv(4u); let OH = mv(5u); let OW = mv(6u); let KH = mv(7u); let KW = mv(8u);
    let SH = i32(mv(9u)); let SW = i32(mv(10u)); let PH = i32(mv(11u)); let PW = i32(mv(12u));
    let DH = i32(mv(13u)); let DW = i32(mv(14u)); let G = mv(15u);
    let x_off = mv(17u); let w_off = mv(18u);
    let ICg = C / G;
    let OCg = OC / G;
    let ow = idx % OW;
    let oh = (idx / OW) % OH;
    let c = (idx / (OW * OH)) % OC;
    let n = idx / (OW * OH * OC);
    let g = c / OCg;
    let ih0 = i32(oh) * SH - PH;
    let iw0 = i32(ow) * SW - PW;
    var acc = 0.0;
    for (var ic = 0u; ic < ICg; ic++) {
        let xb = x_off + (n * C + g * ICg + ic) * H * W;
        let wb = w_off + ((c * ICg + ic) * KH) * KW;
        for (var kh = 0u; kh < KH; kh++) {
            let ih = ih0 + i32(kh) * DH;
            if (ih < 0 || ih >= i32(H)) { continue; }
            for (var kw = 0u; kw < KW; kw++) {
                let iw = iw0 + i32(kw) * DW;
                if (iw < 0 || iw >= i32(W)) { continue; }
                acc = fma(X[xb + u32(ih) * W + u32(iw)], Wt[wb + kh * KW + kw], acc);
            }
        }
    }
    if (mv(16u) != 0u) { acc += B[mv(19u) + c]; }
    Y[idx] = direct_act(acc);
}

// The activation of a Conv + activation step applied while storing (a uniform branch), with
// the arithmetic of the GEMM epilogues (`MatmulAct`) and the elementwise ops: depthwise convs
// (MobileNet, EfficientNet) need no second pass over their output.
fn direct_act(v: f32) -> f32 {
    return conv_act(v, mv(22u), bitcast<f32>(mv(23u)), bitcast<f32>(mv(24u)));
}

// `conv_act` / `direct_sigmoid` are appended from `conv_act_wgsl!` (conv_se.rs), shared with
// the fused depthwise + pool and GEMV kernels so their outputs stay bit-identical.

// Transposed conv: weight is (C, OC/groups, KH, KW); PH/PW are the transposed conv's padding.
@compute @workgroup_size(256)
fn conv_transpose_direct(
    @builtin(global_invocation_id) gid: vec3<u32>,
) {
    let idx = gid.x + gid.y * mv(21u);
    if (idx >= mv(20u)) { return; }
    let C = mv(1u); let H = mv(2u); let W = mv(3u);
    let OC = mv(4u); let OH = mv(5u); let OW = mv(6u); let KH = mv(7u); let KW = mv(8u);
    let SH = i32(mv(9u)); let SW = i32(mv(10u)); let PH = i32(mv(11u)); let PW = i32(mv(12u));
    let DH = i32(mv(13u)); let DW = i32(mv(14u)); let G = mv(15u);
    let x_off = mv(17u); let w_off = mv(18u);
    let ICg = C / G;
    let OCg = OC / G;
    let ow = idx % OW;
    let oh = (idx / OW) % OH;
    let c = (idx / (OW * OH)) % OC;
    let n = idx / (OW * OH * OC);
    let g = c / OCg;
    let oc = c % OCg;
    var acc = 0.0;
    for (var kh = 0u; kh < KH; kh++) {
        let th = i32(oh) + PH - i32(kh) * DH;
        if (th < 0 || th % SH != 0) { continue; }
        let ih = th / SH;
        if (ih >= i32(H)) { continue; }
        for (var kw = 0u; kw < KW; kw++) {
            let tw = i32(ow) + PW - i32(kw) * DW;
            if (tw < 0 || tw % SW != 0) { continue; }
            let iw = tw / SW;
            if (iw >= i32(W)) { continue; }
            for (var ic = 0u; ic < ICg; ic++) {
                let ci = g * ICg + ic;
                let xv = X[x_off + ((n * C + ci) * H + u32(ih)) * W + u32(iw)];
                let wv = Wt[w_off + ((ci * OCg + oc) * KH + kh) * KW + kw];
                acc = fma(xv, wv, acc);
            }
        }
    }
    if (mv(16u) != 0u) { acc += B[mv(19u) + c]; }
    Y[idx] = acc;
}
