//! Sets `native_vk` where wgpu has its Vulkan backend (Windows, and Unix other than Apple's and
//! emscripten): native Vulkan replay (`src/replay/native*.rs`) is built there only.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(native_vk)");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let (os, vendor, family, arch) = (
        var("CARGO_CFG_TARGET_OS"),
        var("CARGO_CFG_TARGET_VENDOR"),
        var("CARGO_CFG_TARGET_FAMILY"),
        var("CARGO_CFG_TARGET_ARCH"),
    );
    let unix = family.split(',').any(|f| f == "unix");
    let vulkan =
        arch != "wasm32" && (os == "windows" || (unix && vendor != "apple" && os != "emscripten"));
    if vulkan {
        println!("cargo:rustc-cfg=native_vk");
    }
}
