//! The MCP test server over stdio (see `tests/support/mcp_server.rs`).
//! `cargo test` builds it into `target/<profile>/examples/`, where the MCP
//! tests find it next to their own binary; it is not meant for anything else.
//!
//! `mcp_fixture [--fail-start] [--slow-start SECONDS]`: `--fail-start` writes
//! an error to stderr and exits with status 2 before serving; `--slow-start`
//! waits that long before serving.

// Test support: a panic with a message is the right way to fail.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unused_imports)]

#[path = "../tests/support/mcp_server.rs"]
mod mcp_server;

use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let log = std::env::var_os("MCP_FIXTURE_LOG").map(std::path::PathBuf::from);
    let mut fixture = mcp_server::Fixture::new(log);
    fixture.may_exit = true;
    fixture.log(&format!("start:{}", std::process::id()));
    if args.iter().any(|a| a == "--fail-start") {
        eprintln!("fixture: bad configuration, giving up");
        std::process::exit(2);
    }
    if let Some(at) = args.iter().position(|a| a == "--slow-start") {
        let secs: f64 = args.get(at + 1).and_then(|s| s.parse().ok()).unwrap_or(60.0);
        tokio::time::sleep(std::time::Duration::from_secs_f64(secs)).await;
    }
    let running = fixture.serve(rmcp::transport::stdio()).await.expect("serve MCP on stdio");
    let _ = running.waiting().await;
}
