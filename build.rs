//! Link settings for lathe's binary: nothing is generated.
//!
//! In optimised builds on Linux:
//!
//! - The linker compresses the debug sections (zlib): the release profile
//!   keeps line tables so a panic's backtrace shows file:line, and std's
//!   backtrace reads compressed sections, so this only makes the binary
//!   smaller.
//! - Relative relocations are packed (`-z pack-relative-relocs`, DT_RELR)
//!   when this machine's linker and C library support it. The binary is
//!   position-independent, and its ~50,000 relative relocations took 1.2 MB
//!   as RELA entries, which the dynamic loader reads at every start, so they
//!   stayed resident for the life of the process (1.2 of the 12.4 MiB idle
//!   RSS, BENCHMARKS.md "Memory at rest"). Packed, they are a few KB. DT_RELR
//!   needs glibc 2.36 or later at run time, so it is only asked for when a
//!   probe program linked with it runs here; otherwise (an older glibc or
//!   linker, a cross build) the binary is linked as before.
//!
//! Debug builds skip both (they cost link time).

use std::path::Path;
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let optimised = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    if linux && optimised {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
        if packed_relocations_work() {
            println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
        }
    }
}

/// Whether a position-independent program linked with
/// `-z pack-relative-relocs` by `cc` (the linker rustc uses here) links and
/// runs on this machine. Never for a cross build: the probe could not run.
fn packed_relocations_work() -> bool {
    let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    let Some(out_dir) = std::env::var_os("OUT_DIR") else { return false };
    if !native {
        return false;
    }
    let dir = Path::new(&out_dir);
    let source = dir.join("relr_probe.c");
    let program = dir.join("relr_probe");
    // A pointer in initialised data: a relative relocation to pack.
    let text = "static int x;\nint *volatile p = &x;\nint main(void) { return p == 0; }\n";
    if std::fs::write(&source, text).is_err() {
        return false;
    }
    let linked = Command::new("cc")
        .args(["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&program)
        .arg(&source)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    linked && Command::new(&program).status().is_ok_and(|status| status.success())
}
