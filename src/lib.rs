//! lathe: a coding agent that editors start as a subprocess and talk to over
//! the Agent Client Protocol (JSON-RPC 2.0, one message per line on
//! stdin/stdout), driving any OpenAI-compatible chat-completions endpoint.
//!
//! # Module map
//!
//! ```text
//! main.rs     CLI, logging to stderr, config loading, signals -> lathe::serve_stdio,
//!             or `lathe exec` / `lathe chat` -> term, or the other subcommands
//! acp/        the only module that speaks ACP: dispatch, prompt content,
//!             agent events -> session/update, stop reasons and errors -> responses,
//!             the editor's fs/terminal/permission methods as the tools' Host
//! term/       the terminal front end (exec, chat): the engine's seams on a
//!             terminal, sessions in the same store; ACP shapes only for the
//!             journal and `--json`, through present; no JSON-RPC
//! present/    what both front ends show and record alike: text made safe to
//!             show, agent events in the journal's (ACP) shape, replay
//! setup       session set-up both front ends share: a session opened with
//!             its prompt, history and MCP servers; metadata; titles; commands
//! rpc         JSON-RPC 2.0 framing, the single ordered writer, outgoing calls
//! agent       the turn loop: sample, stream events, (run tools), repeat; emits AgentEvents
//! session     session state: roots, conversation, the per-session turn worker
//! model/      OpenAI-compatible streaming client; pure chunk decoder (decode.rs),
//!             SSE reading, retries, the endpoint probe
//! tools/      the built-in tools: definitions, descriptions, running them
//!             through the Host seam (local disk and processes, or the editor)
//! tool_definition  what a tool offers the model (name, description, schema):
//!             made by tools and mcp, written on the wire by model
//! permission  the policy: which calls run, ask or are refused
//! rules       "always" answers that outlast the session: project and user rule files
//! hooks/      the user's and the project's hooks around prompts, tool calls and turns
//! commands    slash commands: built-in, the user's Markdown files, the skills
//! agents      the sub-agents a `task` call runs, built in or in Markdown
//! skills      Agent Skills (`SKILL.md` folders): listed in the prompt, slash commands
//! front_matter the front matter of agent and skill files, read line by line
//! mcp/        the session's MCP servers (editor's and configured): connected,
//!             their tools offered and run through the tools' ExternalTools seam
//! prompt      the system prompt from prompts/*.md
//! store/      sessions on disk: meta, journal, the session index
//! checkpoint  each turn's file changes saved before they happen: /undo, /redo
//! undo        checkpoints as both front ends use them: a turn recorded, and
//!             /undo, /redo, /checkpoints on the files and the conversation
//! child       how a process is started: scrubbed environment, supervision
//!             (the `lathe sandbox-exec` trampoline), its own process group
//! platform/   the bottom floor: what differs per operating system, one seam per
//!             concern (the path authority: every file touch judged on its final
//!             target, done on the object judged; file stamps; private files;
//!             the command sandbox: Landlock, Seatbelt or none; console;
//!             folders); imports nothing of lathe but config and errors
//! fs_guard    the path authority's old name, until issue 25's files move over
//! config      TOML / environment -> validated Config
//! discover    with no config at all: a model server already running on
//!             loopback (Ollama, LM Studio, llama.cpp, vLLM), told by its metadata
//! credentials keys `lathe setup` stored (0600), forgotten by a logout; private files
//! cancel      or_cancel: the one way a wait is raced against a token
//! http        the one way an HTTP client is started (rustls over ring)
//! errors      an error and its causes, on one line
//! sync        the one way a std Mutex is locked
//! cli/        `lathe sessions`, `lathe init` and `lathe setup`; doctor: `lathe doctor`;
//!             trace: the `--trace` file (JSON-RPC both ways, model traffic, redacted)
//! redact      the one redaction of secrets: trace, log, doctor, shown URLs
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
pub mod agents;
pub mod build_info;
pub mod cancel;
pub mod checkpoint;
pub mod cli;
pub mod commands;
pub mod config;
pub mod credentials;
pub mod discover;
pub mod doctor;
pub mod errors;
pub mod fork;
pub mod front_matter;
pub mod fs_guard;
pub mod hooks;
pub mod http;
pub mod mcp;
pub mod model;
pub mod permission;
pub mod platform;
pub mod present;
pub mod prompt;
pub mod redact;
pub mod rpc;
pub mod rules;
pub mod session;
pub mod setup;
pub mod skills;
pub mod store;
pub mod sync;
pub mod term;
pub mod tool_definition;
pub mod tools;
pub mod trace;
pub mod undo;

#[cfg(test)]
mod test_support;

pub use acp::{serve, serve_stdio};
