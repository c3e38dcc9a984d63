//! What this binary is: its version, the commit it was built from, the
//! target and the build date, as `build.rs` recorded them. `lathe
//! --version` prints [`SUMMARY`] and `lathe doctor` starts with it, so a bug
//! report says exactly what was run.

use serde::Serialize;

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit (12 hex digits; `+dirty` after it for a dist build of a tree
/// with uncommitted changes), or `unknown` (a build from a source tarball).
pub const COMMIT: &str = env!("LATHE_BUILD_COMMIT");
/// The target triple it was built for.
pub const TARGET: &str = env!("LATHE_BUILD_TARGET");
/// The build date (`YYYY-MM-DD`, UTC, from `SOURCE_DATE_EPOCH`: the commit's
/// date in a dist build), or empty when it was built from source without one.
pub const DATE: &str = env!("LATHE_BUILD_DATE");
/// `0.1.0 (commit 1a2b3c4d5e6f, x86_64-unknown-linux-musl, built 2026-12-04)`,
/// or `... built from source)` without a date.
pub const SUMMARY: &str = env!("LATHE_BUILD_SUMMARY");

/// The same, as one JSON object (`lathe doctor --json`'s `build`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BuildInfo {
    /// [`VERSION`].
    pub version: &'static str,
    /// [`COMMIT`].
    pub commit: &'static str,
    /// [`TARGET`].
    pub target: &'static str,
    /// [`DATE`], `None` when unknown.
    pub date: Option<&'static str>,
}

/// This binary's [`BuildInfo`].
pub fn current() -> BuildInfo {
    BuildInfo { version: VERSION, commit: COMMIT, target: TARGET, date: (!DATE.is_empty()).then_some(DATE) }
}
