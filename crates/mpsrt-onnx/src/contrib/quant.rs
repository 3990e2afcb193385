//! `MatMulNBits`: blockwise-quantized (2, 4 or 8 bit) constant weights, dequantized once at
//! import into the activation's dtype (f32 or f16) and run as a plain `MatMul` (+ bias), so the
//! engine's GEMMs and the precision passes apply unchanged. `accuracy_level` only picks ORT's
//! internal compute type and is ignored. Weights are `[N, k_blocks, blob]` bytes, low bits
//! first; zero points are packed the same way (uint8) or given per block in the scales' dtype;
//! without them the zero point is `2^(bits-1)`. The dequantized value is
//! `(q - zero_point) * scale`.

use super::{Builder, Known};
use crate::proto::TensorProto;
use mpsrt_core::DType;
use mpsrt_graph::HostTensor;

type R<T> = std::result::Result<T, String>;

pub(super) fn matmul_nbits(b: &mut Builder, known: &Known, y: &str) -> R<()> {
    b.only_outputs(&[0])?;
    let a = b.need_input(0, "A")?;
    let (k, n) = (b.int("K", 0), b.int("N", 0));
    let bits = b.int("bits", 4);
    let block = b.int("block_size", 0);
    if k <= 0 || n <= 0 {
        return Err(b.refuse(format!("K and N must be positive, got K={k} N={n}")));
    }
    if !matches!(bits, 2 | 4 | 8) {
        return Err(b.refuse(format!("bits={bits} is not rewritten (2, 4 and 8 are)")));
    }
    if block < 16 || block & (block - 1) != 0 {
        return Err(b.refuse(format!("block_size must be a power of 2 >= 16, got {block}")));
    }
    let (k, n, bits, block) = (k as usize, n as usize, bits as usize, block as usize);
    let blocks = k.div_ceil(block);
    let blob = block * bits / 8;
    let constant = |i: usize, what: &str| -> R<HostTensor> {
        let name = b.need_input(i, what)?;
        (known.constant)(name)
            .ok_or_else(|| b.refuse(format!("input {i} ({what}) must be a constant initializer")))
    };
    let w = constant(1, "B")?;
    let scales = constant(2, "scales")?;
    let zp = b.input(3).map(|_| constant(3, "zero_points")).transpose()?;
    if let Some(g) = b.input(4) {
        // g_idx equal to k / block_size is the default order; anything else is act-order.
        let t = (known.constant)(g).map(|t| t.to_f64_vec());
        let trivial = t.is_some_and(|v| {
            v.len() == k && v.iter().enumerate().all(|(i, &x)| x == (i / block) as f64)
        });
        if !trivial {
            return Err(b.refuse("g_idx (act-order quantization) is not rewritten"));
        }
    }
    if w.dtype != DType::U8 || w.bytes.len() != n * blocks * blob {
        return Err(b.refuse(format!(
            "B must be uint8 [N={n}, {blocks} blocks, {blob} bytes], got {} {:?}",
            w.dtype, w.shape
        )));
    }
    if !matches!(scales.dtype, DType::F32 | DType::F16)
        || scales.shape.iter().product::<usize>() != n * blocks
    {
        return Err(b.refuse(format!(
            "scales must be float or float16 with N * k_blocks = {} entries, got {} {:?}",
            n * blocks,
            scales.dtype,
            scales.shape
        )));
    }
    let scale = scales.to_f64_vec();
    let per_byte = 8 / bits;
    let mask = (1u32 << bits) - 1;
    let zero_point: Box<dyn Fn(usize, usize) -> f64> = match &zp {
        None => Box::new(|_, _| (1u32 << (bits - 1)) as f64),
        Some(z) if z.dtype == DType::U8 => {
            let row = blocks.div_ceil(per_byte);
            if z.bytes.len() != n * row {
                return Err(b.refuse(format!(
                    "packed zero_points must hold N * {row} bytes, got {:?}",
                    z.shape
                )));
            }
            let bytes = z.bytes.clone();
            Box::new(move |r, kb| {
                let byte = bytes[r * row + kb / per_byte] as u32;
                ((byte >> ((kb % per_byte) * bits)) & mask) as f64
            })
        }
        Some(z) if z.dtype == scales.dtype && z.bytes.len() == scales.bytes.len() => {
            let v = z.to_f64_vec();
            Box::new(move |r, kb| v[r * blocks + kb])
        }
        Some(z) => {
            return Err(b.refuse(format!(
                "zero_points must be uint8 (packed) or {} like the scales, got {} {:?}",
                scales.dtype, z.dtype, z.shape
            )))
        }
    };
    // W[k, n] (row-major [K, N]) for `A @ W`.
    let mut out = vec![0f32; k * n];
    for r in 0..n {
        for kb in 0..blocks {
            let s = scale[r * blocks + kb];
            let z = zero_point(r, kb);
            let base = (r * blocks + kb) * blob;
            for i in 0..block.min(k - kb * block) {
                let byte = w.bytes[base + i / per_byte] as u32;
                let q = ((byte >> ((i % per_byte) * bits)) & mask) as f64;
                out[(kb * block + i) * n + r] = ((q - z) * s) as f32;
            }
        }
    }
    let (data_type, raw) = match scales.dtype {
        DType::F16 => {
            (10, out.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect())
        }
        _ => (1, out.iter().flat_map(|v| v.to_le_bytes()).collect()),
    };
    let weight = b.constant(TensorProto {
        dims: vec![k as i64, n as i64],
        data_type: Some(data_type),
        raw_data: Some(raw),
        ..Default::default()
    });
    match b.input(5) {
        Some(bias) => {
            let p = b.value("MatMul", &[a, &weight], vec![], None);
            b.value("Add", &[&p, bias], vec![], Some(y));
        }
        None => {
            b.value("MatMul", &[a, &weight], vec![], Some(y));
        }
    }
    Ok(())
}
