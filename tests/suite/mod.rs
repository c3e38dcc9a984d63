//! The integration test suites, one module per area.

// Test helpers outside `#[test]` functions may panic too; clippy's
// `allow-unwrap-in-tests` only covers the test functions themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bench_smoke;
mod cancel;
mod children;
mod cli;
mod concurrency;
mod fetch;
mod file_safety;
mod hygiene;
mod journal;
mod mcp;
mod mock_server;
mod official_client;
mod persistence;
mod protocol;
mod providers;
mod retries;
mod sandbox;
mod sessions;
mod sse_split;
mod term_chat;
mod term_exec;
mod text_formats;
mod tools;
mod turns;
mod upstream;
mod workspace_boundary;
