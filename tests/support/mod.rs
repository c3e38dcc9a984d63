//! Support library for the integration tests: a mock OpenAI-compatible model
//! server ([`mock_openai`]), a scripted ACP client that drives lathe in this
//! process or as the real binary ([`acp_client`], [`harness`]), the tests'
//! time ([`clock`]: real-time bounds, a frozen virtual clock), lathe's logs
//! captured in-process ([`logs`]), and small fixtures.

// Every suite links this module, but no single suite uses every helper.
#![allow(dead_code)]
// Test support: a panic with a message is the right way to fail. (Clippy's
// `allow-expect-in-tests` only covers `#[test]` functions, not helpers.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod acp_client;
pub mod agent_env;
pub mod clock;
pub mod commands;
pub mod edit_match;
pub mod editor;
pub mod harness;
pub mod logs;
pub mod mcp_server;
pub mod mock_openai;
pub mod sse;
/// Links, FIFOs, modes, junctions where the system makes them, else
/// `skipped: <why>` (the lib's `platform::testing`, one copy for both).
#[path = "../../src/platform/testing.rs"]
pub mod testing;
pub mod web;

pub use agent_env::write_config;

/// Pids of the live (not zombie) processes whose command line starts with
/// `prefix` (arguments joined by spaces, with a trailing space): `/proc` on
/// Linux, the system's process list on Windows ([`commands`]).
pub fn live_processes(prefix: &str) -> Vec<u32> {
    commands::live_processes(prefix)
}
