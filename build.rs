//! What the binary says it is, and its link settings.
//!
//! What it is (`lathe --version`, `lathe doctor`; see `src/build_info.rs`):
//! the commit, the target and the build date, as environment variables for
//! the crate. The commit is `$LATHE_BUILD_COMMIT` when set (the dist build,
//! `cargo xtask dist`, sets it), else what git says `HEAD` is when this
//! directory is a git checkout's top level (a clone), else `unknown` (a
//! source tarball). The date is the UTC day of `$SOURCE_DATE_EPOCH` (the dist
//! build sets it to the commit's time, so two builds of one commit say the
//! same); without it the binary says it was built from source. Never the
//! clock: the same sources give the same binary.
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
//! - A static musl binary (`cargo xtask dist` links it with zig) is made
//!   position-independent (static-pie) with `-fPIE` at link time: zig's
//!   linker ignores the `-static-pie` rustc asks for and would make a
//!   fixed-address executable, whose code no address randomisation moves.
//!   (Its relocations stay RELA: zig's linker does not pack them.)
//!
//! Debug builds skip these (they cost link time).

use std::path::Path;
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    build_info();
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let optimised = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    let musl = std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "musl");
    if linux && optimised {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
        if musl {
            println!("cargo:rustc-link-arg-bins=-fPIE");
        }
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

/// Sets `LATHE_BUILD_COMMIT`, `LATHE_BUILD_TARGET`, `LATHE_BUILD_DATE` (empty
/// when unknown) and `LATHE_BUILD_SUMMARY` (the one line `--version` prints
/// after the name) for the crate.
fn build_info() {
    println!("cargo:rerun-if-env-changed=LATHE_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown-target".to_owned());
    let commit = match std::env::var("LATHE_BUILD_COMMIT") {
        Ok(commit) if !commit.trim().is_empty() => commit.trim().to_owned(),
        _ => git_commit().unwrap_or_else(|| "unknown".to_owned()),
    };
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|epoch| epoch.trim().parse::<u64>().ok())
        .map(utc_day)
        .unwrap_or_default();
    let built = if date.is_empty() { "built from source".to_owned() } else { format!("built {date}") };
    println!("cargo:rustc-env=LATHE_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=LATHE_BUILD_TARGET={target}");
    println!("cargo:rustc-env=LATHE_BUILD_DATE={date}");
    println!("cargo:rustc-env=LATHE_BUILD_SUMMARY={version} (commit {commit}, {target}, {built})");
}

/// `HEAD`'s commit (12 hex digits) when this package's directory is the top
/// level of a git work tree (not a tarball unpacked inside some other
/// repository), and the files that change when `HEAD` moves are watched.
fn git_commit() -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let git = |args: &[&str]| -> Option<String> {
        let output = Command::new("git").arg("-C").arg(&dir).args(args).stderr(Stdio::null()).output().ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), Path::new(&dir)) {
        return None;
    }
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it
    // names (a commit), and packed-refs (a gc). Paths as git gives them
    // (a worktree keeps HEAD apart from the refs).
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        // Relative to the directory git ran in; only files that exist (cargo
        // reruns a script whose watched file is missing every time).
        let Some(path) = git(&["rev-parse", "--git-path", &name]) else { continue };
        let path = Path::new(&dir).join(path);
        if path.is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}

/// The UTC day (`YYYY-MM-DD`) of a Unix time: the date part of its
/// RFC 3339 form.
fn utc_day(epoch: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch);
    humantime::format_rfc3339_seconds(time).to_string().chars().take(10).collect()
}
