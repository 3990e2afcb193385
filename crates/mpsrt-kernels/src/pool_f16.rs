//! `pool.wgsl` over f16 storage (issue 23: ResNet-50's max pool under `precision=f16` spent
//! most of its time widening its 51 MB input to f32 and narrowing the result). The same kernel
//! text with the input and output arrays as `array<f16>`: each loaded value is widened to f32
//! in a register, so the max / NaN rules and the average's f32 sum are the f32 kernel's, and
//! the result is narrowed once. No index output (callers asking for indices take the f32 form).

use std::sync::OnceLock;

/// The f16 form of `pool.wgsl` (entry point `pool2d`, same bindings and meta words).
pub fn pool_f16_wgsl() -> &'static str {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| {
        let pairs = [
            ("var<storage, read> X: array<f32>;", "var<storage, read> X: array<f16>;"),
            ("var<storage, read_write> Y: array<f32>;", "var<storage, read_write> Y: array<f16>;"),
            ("let v = X[base + u32(h * W + w)];", "let v = f32(X[base + u32(h * W + w)]);"),
            ("    Y[idx] = r;\n", "    Y[idx] = f16(r);\n"),
            ("Y[mv(17u) + idx] = bitcast<f32>(bidx);", "_ = bidx;"),
        ];
        let mut s = format!("enable f16;\n{}", include_str!("pool.wgsl"));
        for (from, to) in pairs {
            // A test renders this, so an edit of pool.wgsl that breaks a pattern fails CI.
            assert!(s.contains(from), "pool.wgsl changed: {from}");
            s = s.replace(from, to);
        }
        s
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn f16_pool_validates_and_translates_to_msl() {
        let src = super::pool_f16_wgsl();
        assert!(!src.contains("array<f32>"), "{src}");
        let msl = crate::validate::wgsl_to_msl(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        assert!(msl.contains("half"), "{msl}");
    }
}
