//! Link settings for lathe's binary: nothing is generated.
//!
//! In optimised builds on Linux, the linker compresses the debug sections
//! (zlib): the release profile keeps line tables so a panic's backtrace shows
//! file:line, and std's backtrace reads compressed sections, so this only
//! makes the binary smaller. Debug builds skip it (it costs link time).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let optimised = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    if linux && optimised {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
