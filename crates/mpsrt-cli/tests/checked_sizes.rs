//! Issue 19 on the CLI surface: `mpsrt run` given crafted `.npy`/`.npz` headers (dims whose
//! product overflows, dims larger than the data, random header shapes) and bad arguments
//! (`--input` twice, `--log bogus`, an unwritable `--output`) must exit with a clean one-line
//! error — never a panic (exit code 101) or an abort — and must check the output path before
//! running the model.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn mpsrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mpsrt"));
    c.env_remove("RUST_LOG");
    c
}

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/model_repository/simple/1/model.onnx")
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("mpsrt-checked-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A version-1 `.npy` with `header_shape` in its header and `data` bytes after it.
fn npy(path: &Path, descr: &str, header_shape: &str, data: usize) {
    let mut h =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {header_shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    b.extend(std::iter::repeat_n(0u8, data));
    std::fs::write(path, b).unwrap();
}

fn run(args: &[&str]) -> Output {
    mpsrt().args(args).output().unwrap()
}

/// Exit code 1 (or clap's 2) with an `error:` line containing `want`; never 101 (panic) or a signal.
fn assert_clean_error(o: &Output, want: &str, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    let code = o.status.code();
    assert!(matches!(code, Some(1) | Some(2)), "{what}: exit {code:?}, stderr:\n{err}");
    assert!(!err.contains("panicked"), "{what}: panicked:\n{err}");
    assert!(err.contains(want), "{what}: expected {want:?} in:\n{err}");
}

#[test]
fn crafted_npy_headers_are_refused_cleanly() {
    let d = dir();
    let m = model();
    let m = m.to_str().unwrap();
    // (descr, header shape, data bytes, expected text)
    let cases: &[(&str, &str, usize, &str)] = &[
        ("<i4", "(4294967296, 4294967296)", 24, "overflows"),
        ("<i4", "(18446744073709551615,)", 24, "overflows"),
        ("<i4", "(4611686018427387904, 3)", 24, "overflows"),
        ("<i4", "(2, 16)", 24, "holds 24 bytes"),
        ("<i4", "(1000000000, 16)", 0, "holds 0 bytes"),
        ("<f8", "(3,)", 8, "holds 8 bytes"),
    ];
    for (i, (descr, shape, data, want)) in cases.iter().enumerate() {
        let p = d.join(format!("h{i}.npy"));
        npy(&p, descr, shape, *data);
        let input = format!("INPUT0={}", p.display());
        let o = run(&["run", m, "--input", &input, "--device", "cpu"]);
        assert_clean_error(&o, want, &format!("npy header {shape} over {data} bytes"));
        // The same array inside a .npz.
        let z = d.join(format!("h{i}.npz"));
        let f = std::fs::File::create(&z).unwrap();
        let mut zw = zip_entry(f, "INPUT0.npy", &std::fs::read(&p).unwrap());
        zw.flush_all();
        let o = run(&["run", m, "--input", z.to_str().unwrap(), "--device", "cpu"]);
        let code = o.status.code();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code, Some(1), "npz {shape}: exit {code:?}\n{err}");
        assert!(!err.contains("panicked"), "npz {shape}:\n{err}");
    }
}

/// A stored (uncompressed) one-entry zip, as `numpy.savez` writes: enough for npyz to read.
struct ZipOut {
    bytes: Vec<u8>,
    file: std::fs::File,
}

impl ZipOut {
    fn flush_all(&mut self) {
        use std::io::Write;
        self.file.write_all(&self.bytes).unwrap();
    }
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xedb8_8320 } else { c >> 1 };
        }
    }
    !c
}

fn zip_entry(file: std::fs::File, name: &str, data: &[u8]) -> ZipOut {
    let (n, crc, len) = (name.as_bytes(), crc32(data), data.len() as u32);
    let mut b = Vec::new();
    let le16 = |b: &mut Vec<u8>, v: u16| b.extend_from_slice(&v.to_le_bytes());
    let le32 = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
    le32(&mut b, 0x0403_4b50);
    for v in [20u16, 0, 0, 0, 0] {
        le16(&mut b, v);
    }
    le32(&mut b, crc);
    le32(&mut b, len);
    le32(&mut b, len);
    le16(&mut b, n.len() as u16);
    le16(&mut b, 0);
    b.extend_from_slice(n);
    b.extend_from_slice(data);
    let cd = b.len() as u32;
    le32(&mut b, 0x0201_4b50);
    for v in [20u16, 20, 0, 0, 0, 0] {
        le16(&mut b, v);
    }
    le32(&mut b, crc);
    le32(&mut b, len);
    le32(&mut b, len);
    for v in [n.len() as u16, 0, 0, 0, 0] {
        le16(&mut b, v);
    }
    le32(&mut b, 0);
    le32(&mut b, 0);
    b.extend_from_slice(n);
    let cd_len = b.len() as u32 - cd;
    le32(&mut b, 0x0605_4b50);
    for v in [0u16, 0, 1, 1] {
        le16(&mut b, v);
    }
    le32(&mut b, cd_len);
    le32(&mut b, cd);
    le16(&mut b, 0);
    ZipOut { bytes: b, file }
}

#[test]
fn bad_arguments_are_errors_before_the_model_runs() {
    let d = dir();
    let a = d.join("a.npy");
    // A valid (2, 16) int32 input.
    npy(&a, "<i4", "(2, 16)", 128);
    let m = model();
    let m = m.to_str().unwrap();
    let x0 = format!("INPUT0={}", a.display());
    let x1 = format!("INPUT1={}", a.display());
    let o = run(&["run", m, "--input", &x0, "--input", &x0, "--device", "cpu"]);
    assert_clean_error(&o, "given twice", "--input twice");
    let o = run(&["--log", "bogus", "run", m, "--input", &x0, "--input", &x1, "--device", "cpu"]);
    assert_clean_error(&o, "--log", "--log bogus");
    // An unwritable output fails first: no "ran ..." line, so the model never ran.
    let bad = d.join("missing-dir").join("out.npz");
    let o = run(&[
        "run",
        m,
        "--input",
        &x0,
        "--input",
        &x1,
        "--device",
        "cpu",
        "--output",
        bad.to_str().unwrap(),
    ]);
    assert_clean_error(&o, "cannot write there", "unwritable --output");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("ran "), "ran before the check");
    let o = run(&["run", m, "--input", &x0, "--input", &x1, "--device", "cpu", "--output"]);
    assert_eq!(o.status.code(), Some(2), "--output without a value is clap's usage error");
    // A write error after the run (a full disk) is one clean error line, no debug output.
    if Path::new("/dev/full").exists() {
        let o = run(&[
            "run",
            m,
            "--input",
            &x0,
            "--input",
            &x1,
            "--device",
            "cpu",
            "--output",
            "/dev/full",
        ]);
        assert_clean_error(&o, "No space left", "--output /dev/full");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("drop failed"), "stray debug line:\n{err}");
    }
    // Directives and levels still work, and a good run writes its output.
    let good = d.join("out.npz");
    let o = run(&[
        "--log",
        "mpsrt=info,warn",
        "run",
        m,
        "--input",
        &x0,
        "--input",
        &x1,
        "--device",
        "cpu",
        "--output",
        good.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(good.exists());
}

/// A bounded fuzz of `.npy`/`.npz` reading: random mutations of a valid (2, 16) int32 input
/// (flipped header and data bytes, truncations, hostile header shapes, a corrupted header
/// length), each run through `mpsrt run` as a `.npy` and inside a `.npz`. Every run must end in
/// success or a clean error: never a panic (exit 101) or a signal. `MPSRT_FUZZ_CASES` sets the
/// count (default 24, two processes each).
#[test]
fn mutated_npy_and_npz_inputs_never_panic_or_abort() {
    let d = dir().join("fuzz");
    std::fs::create_dir_all(&d).unwrap();
    let m = model();
    let m = m.to_str().unwrap();
    let good = d.join("good.npy");
    npy(&good, "<i4", "(2, 16)", 128);
    let base = std::fs::read(&good).unwrap();
    let x1 = format!("INPUT1={}", good.display());
    let cases: u64 =
        std::env::var("MPSRT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24);
    // xorshift64: a fixed seed keeps failures reproducible without a fuzzing dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let dims = ["0", "1", "2", "16", "4294967296", "9223372036854775807", "-1", "3.5", "1 << 40"];
    for i in 0..cases {
        let p = d.join(format!("m{i}.npy"));
        let mut b = base.clone();
        let what = match next() % 4 {
            0 => {
                for _ in 0..1 + next() % 8 {
                    let at = (next() as usize) % b.len();
                    b[at] ^= 1 << (next() % 8);
                }
                "flipped bits"
            }
            1 => {
                b.truncate((next() as usize) % b.len());
                "truncated"
            }
            2 => {
                let shape = format!(
                    "({}, {})",
                    dims[(next() as usize) % dims.len()],
                    dims[(next() as usize) % dims.len()]
                );
                npy(&p, "<i4", &shape, (next() as usize) % 256);
                b = std::fs::read(&p).unwrap();
                "hostile shape"
            }
            _ => {
                let len = (next() % 65536) as u16;
                b[8..10].copy_from_slice(&len.to_le_bytes());
                "header length"
            }
        };
        std::fs::write(&p, &b).unwrap();
        let input = format!("INPUT0={}", p.display());
        let z = d.join(format!("m{i}.npz"));
        let mut zw = zip_entry(std::fs::File::create(&z).unwrap(), "INPUT0.npy", &b);
        zw.flush_all();
        for args in [
            vec!["run", m, "--input", &input, "--input", &x1, "--device", "cpu"],
            vec!["run", m, "--input", z.to_str().unwrap(), "--input", &x1, "--device", "cpu"],
        ] {
            let o = run(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            let code = o.status.code();
            assert!(matches!(code, Some(0..=2)), "case {i} ({what}): exit {code:?}\n{err}");
            assert!(!err.contains("panicked"), "case {i} ({what}): panicked\n{err}");
        }
    }
}
