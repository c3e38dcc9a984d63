//! lathe: a coding agent that editors start as a subprocess and talk to over
//! the Agent Client Protocol (JSON-RPC 2.0, one message per line on
//! stdin/stdout), driving any OpenAI-compatible chat-completions endpoint.
//!
//! # Module map
//!
//! ```text
//! main.rs     CLI, logging to stderr, config loading, signals -> lathe::serve_stdio,
//!             or `lathe exec` / `lathe chat` -> term
//! acp/        the only module that speaks ACP: dispatch, prompt content,
//!             agent events -> session/update, stop reasons and errors -> responses
//! term/       the terminal front end (exec, chat): the engine's seams on a
//!             terminal, sessions in the same store; ACP shapes only for the
//!             journal and `--json`, through acp::updates; no JSON-RPC
//! setup       session set-up both front ends share: a session opened with
//!             its prompt, history and MCP servers; metadata; titles; commands
//! rpc         JSON-RPC 2.0 framing, the single ordered writer, outgoing calls
//! agent       the turn loop: sample, stream events, (run tools), repeat; emits AgentEvents
//! session     session state: roots, conversation, the running turn's token
//! model/      OpenAI-compatible streaming client; pure chunk decoder (decode.rs)
//! mcp/        the session's MCP servers (editor's and configured): connected,
//!             their tools offered and run through the tools' ExternalTools seam
//! prompt      the system prompt from prompts/*.md
//! child       how a process is started: scrubbed environment, supervision
//!             (the `lathe sandbox-exec` trampoline), its own process group
//! sandbox     the Landlock policy commands run under, applied by the trampoline
//! fs_guard    the path authority: every file touch judged on its final target,
//!             done on the object judged; the reader for untrusted workspace files
//! config      TOML / environment -> validated Config
//! ```
//!
//! Knowledge flows one way: `acp -> agent -> {model, session, prompt} -> config`,
//! with `rpc` under `acp`. The agent reaches the editor only through the
//! [`agent::EventSink`] seam that `acp` implements (and `term`, for a terminal).
//!
//! Stdout carries the protocol and nothing else: this crate never prints
//! (`clippy::print_stdout` is denied) and logs through `tracing` to stderr.
//! Only `term`, in `lathe exec` and `lathe chat`, writes to stdout and
//! stderr itself, through `io::Write`.

#![deny(clippy::print_stdout, clippy::print_stderr)]
#![warn(missing_docs)]

pub mod acp;
pub mod agent;
pub mod cancel;
pub mod child;
pub mod commands;
pub mod config;
pub mod fs_guard;
pub mod mcp;
pub mod model;
pub mod permission;
pub mod prompt;
pub mod rpc;
pub mod sandbox;
pub mod session;
pub mod setup;
pub mod store;
pub mod term;
pub mod tools;

pub use acp::{serve, serve_stdio};
