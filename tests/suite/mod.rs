//! The integration test suites, one module per area.
//!
//! # In this process, or the binary
//!
//! Every suite drives lathe in this process by default: `lathe::serve` over
//! in-memory pipes, configured exactly as `main` configures it
//! (`support::acp_client::Agent::in_process`, `support::harness::Harness`),
//! with the mock model on loopback and, where time is the subject, a frozen
//! virtual clock (`support::clock`). The turn loop itself also has unit tests
//! (src/agent/tests.rs).
//!
//! These tests run the `lathe` binary instead, because what they check is
//! only seen in a process (`grep -rn "Harness::process\|Agent::spawn\|CARGO_BIN_EXE" tests`
//! finds them; keep this list in step):
//!
//! Serving ACP as a process (`Harness::process`, `Agent::spawn*`):
//! - `hygiene::signals_kill_shell_children_and_exit`,
//!   `hygiene::sigterm_releases_client_terminals`: SIGINT/SIGTERM reach a
//!   process; the exit status is the process's.
//! - `hygiene::children_neither_inherit_stdout_nor_read_stdin`: the file
//!   descriptors a child gets are the process's stdio (`/proc/<pid>/fd`).
//! - `hygiene::a_client_that_stops_reading_our_output_ends_the_agent`:
//!   EPIPE on the real stdout, on `serve_stdio`'s writer thread.
//! - `children::nothing_outlives_a_killed_lathe`: SIGKILL of lathe and the
//!   process tree under it.
//! - `children::children_never_see_the_secrets`: the secrets are in the
//!   agent's process environment; an in-process agent cannot give its
//!   children an environment the test process does not have.
//! - `sessions::a_session_survives_a_hard_kill_and_replays_exactly`: SIGKILL
//!   mid-turn, nothing flushed, then a new process on the same data.
//! - `persistence::session_log_handles_are_closed_with_their_sessions`:
//!   counts the process's own open files.
//! - `persistence::a_full_disk_is_reported_once_and_the_torn_tail_repaired`:
//!   a file-size limit (`prlimit --fsize`) on the process.
//! - `workspace_boundary::instruction_files_linking_out_of_the_project_stay_out_of_the_prompt`:
//!   `/proc/self/environ` must be the agent's own environment, and the
//!   warnings are logged from blocking threads, which the in-process log
//!   capture (the test's thread only) does not see.
//! - `fetch::the_proxy_from_the_environment_is_used`: the proxy comes from
//!   the process environment (the test process's cannot be changed safely).
//! - `upstream::the_api_key_is_sent_and_never_logged`: everything the
//!   process writes to stderr at `trace`, from every thread.
//! - `sandbox::sandboxed_mcp_servers_run_restricted`: the MCP server's
//!   parent chain leads to the agent's pid.
//! - `official_client`: runs the package `tests/official-sdk`, whose two
//!   tests have the official ACP SDK start the binary as an editor does and
//!   check its stdio framing and clean exit.
//! - `file_safety::sigkill_during_large_writes_never_leaves_a_torn_file`
//!   (stress tier): SIGKILL during a write.
//! - `dist` (both tests): the binary with an empty environment (`env -i`),
//!   and the release archive's binary when `LATHE_DIST_BIN` names it.
//!
//! The binary's command line, not the ACP server (`Command::new(lathe)`):
//! `cli` (`--help`, `--version`, config errors and lookup, stdout purity of
//! logs, the TTY greeting), the `sandbox-exec` trampoline in `children`
//! (exit status, signals, a dead parent) and `sandbox` (confinement of
//! commands and the network), and `bench_smoke` (stress tier: the benchmarks
//! measure the binary).
//!
//! The terminal front ends and the other subcommands are the binary's own
//! entry points (`main` parses them, picks a runtime and an exit code), so
//! their suites run it: `term_exec` (exit codes per stop reason, stdin and
//! stdout, SIGINT mid-turn and no child left), `term_chat` (a
//! pseudo-terminal: rendering, one-key answers, Ctrl-C, Ctrl-D),
//! `cli_sessions` (`sessions`, `init`, `completions`, `man`), `doctor` and
//! `trace` (the `--trace` file of a process). That is about 45 process tests
//! in all, more than the ten the engine work aimed at: the in-process
//! harness serves ACP only, and the doctor and sessions suites could move to
//! the library entry points (`lathe::doctor::run`, `lathe::cli::sessions::run`)
//! where a test does not check the command line itself.

// Test helpers outside `#[test]` functions may panic too; clippy's
// `allow-unwrap-in-tests` only covers the test functions themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ask_user;
mod auth;
mod bench_smoke;
mod cancel;
mod checkpoints;
// Unix process trees: `/proc`, `sh`, signals and the trampoline's group (Windows' Job Objects: src/platform/process).
#[cfg(unix)]
mod children;
mod cli;
mod cli_sessions;
mod concurrency;
mod discovery;
mod dist;
mod doctor;
mod edit_match;
mod fetch;
mod file_safety;
mod fork;
// Signals (SIGTERM, SIGINT, SIGHUP), `/proc` and `sleep`: Unix's (Windows has no signals to send a process).
#[cfg(unix)]
mod hygiene;
mod journal;
mod lasting;
mod mcp;
mod mock_server;
mod official_client;
mod persistence;
mod plan_mode;
mod protocol;
mod providers;
mod retries;
// The command sandbox: Windows has none (auto mode asks; `lathe doctor` says why, tests/suite/doctor.rs).
#[cfg(unix)]
mod sandbox;
mod sessions;
// Through a pseudo-terminal (expectrl's Unix sessions; wine 8 has no ConPTY to drive).
#[cfg(unix)]
mod setup;
mod skills;
mod sse_split;
mod standard_updates;
mod steering;
mod subagents;
// Through a pseudo-terminal (expectrl's Unix sessions; wine 8 has no ConPTY to drive).
#[cfg(unix)]
mod term_chat;
mod term_exec;
mod text_formats;
mod tools;
mod trace;
mod transcript;
mod turns;
mod upstream;
mod workspace_boundary;
