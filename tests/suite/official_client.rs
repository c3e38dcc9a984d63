//! Interoperability with the official ACP SDK: its tests live in a package
//! of their own, `tests/official-sdk` (the SDK pins an older schema crate
//! than lathe's, and one dependency graph holds one 1.x version of a crate;
//! its Cargo.toml says more). This test builds and runs that package against
//! the binary this build made, so `cargo test` runs it like any other suite.
//!
//! The package builds into `target/official-sdk` (its own graph; the first
//! run compiles the SDK and the mock server's dependencies once), with
//! `--locked` against its own Cargo.lock.

use std::path::Path;
use std::process::Command;

#[test]
fn the_official_sdk_client_interoperates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lathe = Path::new(env!("CARGO_BIN_EXE_lathe"));
    // The binary is `<target>/<profile>/lathe`; the package gets a target directory beside the profiles.
    let target = lathe.parent().and_then(Path::parent).expect("the binary is in <target>/<profile>/");
    // A Windows build made by another system's cargo (the Linux host's,
    // when this runs under wine) cannot start it: a Windows process cannot
    // run a Linux program with its output piped ("Invalid handle").
    if cfg!(windows) && Path::new(env!("CARGO")).extension().is_none_or(|ext| !ext.eq_ignore_ascii_case("exe")) {
        crate::support::testing::skipped(
            "the official SDK's tests",
            &format!("cargo ({}) is another system's program, which this Windows process cannot run", env!("CARGO")),
        );
        return;
    }
    let output = Command::new(env!("CARGO"))
        .args(["test", "--locked", "--manifest-path"])
        .arg(root.join("tests/official-sdk/Cargo.toml"))
        .env("CARGO_TARGET_DIR", target.join("official-sdk"))
        .env("LATHE_BIN", lathe)
        .output()
        .expect("run cargo for tests/official-sdk");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the official-SDK tests failed ({})\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    // Both of its tests ran (a filter or a missing test would pass silently).
    assert!(stdout.contains("test result: ok. 2 passed"), "expected its two tests to pass:\n{stdout}");
}
