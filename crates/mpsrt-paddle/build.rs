//! Builds `mpsrt_paddle_loader.so` (`loader/loader.rs`) with this build's `rustc` and stages it
//! in `python/paddle_custom_device/`, from where maturin puts it into the wheel (pyproject's
//! `include`), so that `pip install ./python` lets `import paddle` find the plugin without
//! `CUSTOM_DEVICE_ROOT`. A failure only warns: the plugin itself works either way.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=loader/loader.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let lib = out.join("mpsrt_paddle_loader.so");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let status = Command::new(&rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "cdylib",
            "--crate-name",
            "mpsrt_paddle_loader",
        ])
        .args(["-C", "opt-level=2", "-C", "strip=symbols", "--target", &target, "-o"])
        .arg(&lib)
        .arg("loader/loader.rs")
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => {
            println!("cargo:warning=mpsrt-paddle: building the Paddle plugin loader failed ({other:?}); Paddle will need CUSTOM_DEVICE_ROOT");
            return;
        }
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let python = manifest.join("../../python");
    if python.join("pyproject.toml").is_file() {
        let dir = python.join("paddle_custom_device");
        let dest = dir.join("mpsrt_paddle_loader.so");
        // Re-run when the staged copy is deleted. Its mtime is set to the source's, older than
        // this run, so an intact copy does not make every later build re-run this script.
        println!("cargo:rerun-if-changed={}", dest.display());
        let staged =
            std::fs::create_dir_all(&dir).and_then(|_| std::fs::copy(&lib, &dest)).and_then(|_| {
                let src = std::fs::metadata("loader/loader.rs")?.modified()?;
                std::fs::File::options().write(true).open(&dest)?.set_modified(src)
            });
        if let Err(e) = staged {
            println!("cargo:warning=mpsrt-paddle: could not stage the Paddle plugin loader: {e}");
        }
    }
}
