//! lathe as users get it: the binary of a release archive (`cargo xtask
//! check` extracts it and points `LATHE_DIST_BIN` at it), or, without that
//! variable, this build's binary. With an empty environment (`env -i`: no
//! `HOME`, no `PATH`, no locale, as an editor on another distribution may
//! start it) it says what it is and serves one ACP turn against the mock
//! model: `initialize`, `session/new`, and a prompt whose model reads a
//! file, writes one and runs a command.
//!
//! A Windows build is run on Linux under wine: `LATHE_DIST_RUNNER=wine`
//! (`cargo xtask check` and `.ci/run` set it) starts the binary through it,
//! hands it paths as wine names them (`Z:\tmp\...`), and keeps the
//! environment wine itself needs (`WINE*`, `HOME`, `PATH`): the Windows
//! program then sees wine's default environment, the nearest to an empty
//! one there is.

use std::path::{Path, PathBuf};

use serde_json::json;
use tokio::process::Command;

use crate::support::acp_client::{Agent, handshake, prompt};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::mock_openai::{MockOpenAi, text_reply, tool_call_reply, tool_result};
use crate::support::write_config;

/// The binary under test: `$LATHE_DIST_BIN` (made absolute: the turn runs
/// in the project's folder), else this build's.
fn binary() -> PathBuf {
    std::env::var_os("LATHE_DIST_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_lathe")),
        |path| std::path::absolute(path).expect("LATHE_DIST_BIN made absolute"),
    )
}

/// What starts the binary (`wine` for a Windows build), if anything.
fn runner() -> Option<PathBuf> {
    std::env::var_os("LATHE_DIST_RUNNER").filter(|runner| !runner.is_empty()).map(PathBuf::from)
}

/// The binary, started with an empty environment (or through the runner,
/// with only what the runner needs).
fn started() -> std::process::Command {
    let mut command = match runner() {
        Some(runner) => {
            let mut command = std::process::Command::new(runner);
            command.arg(binary());
            command
        }
        None => std::process::Command::new(binary()),
    };
    command.env_clear();
    if runner().is_some() {
        let kept = std::env::vars_os().filter(|(name, _)| {
            let name = name.to_string_lossy();
            name.starts_with("WINE") || name == "HOME" || name == "PATH"
        });
        command.envs(kept);
    }
    command
}

/// `path` as the binary names it: under wine, on its `Z:` drive (the
/// Linux root).
fn native(path: &Path) -> PathBuf {
    if runner().is_some() {
        PathBuf::from(format!("Z:{}", path.display()).replace('/', "\\"))
    } else {
        path.to_path_buf()
    }
}

#[test]
fn with_an_empty_environment_it_says_what_it_is() {
    let output = started().arg("--version").output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let line = String::from_utf8(output.stdout).unwrap();
    // Built from this tree: the same version and commit as this test's build.
    let prefix = format!("lathe {} (commit {}", env!("CARGO_PKG_VERSION"), lathe::build_info::COMMIT);
    assert!(line.starts_with(&prefix), "{line:?} starts with {prefix:?}");
    if let Some(target) = std::env::var_os("LATHE_DIST_TARGET") {
        let target = target.to_string_lossy();
        assert!(line.contains(&format!(", {target}, built ")), "{line:?} names {target}");
    }
}

#[tokio::test]
async fn with_an_empty_environment_it_serves_a_turn_that_reads_writes_and_runs_a_command() {
    let mock = MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let project = project.canonicalize().unwrap();
    std::fs::write(project.join("notes.txt"), "the answer is 42\n").unwrap();
    // No sandbox, so the command asks on every system alike (the default mode).
    let config = write_config(home.path(), &mock.base_url(), "[sandbox]\nmode = \"off\"\n");
    mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "notes.txt"}))]));
    mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "answer.txt", "content": "42\n"}))]));
    // `echo` is the same in sh and cmd.exe.
    mock.push(tool_call_reply(&[("call_c", "shell", json!({"command": "echo lathe-smoke"}))]));
    mock.push(text_reply("Wrote answer.txt."));

    let mut command = Command::from(started());
    command
        .arg("--config")
        .arg(native(&config))
        .arg("--data-dir")
        .arg(native(&home.path().join("data")))
        .current_dir(&project);
    let mut agent = Agent::spawn_command(command);
    let session = handshake(&mut agent, json!({}), &native(&project)).await;
    let id = prompt(&mut agent, &session, "put the answer from notes.txt in answer.txt, then say so").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once"), Permission::Select("allow_once")]);
    let (_, response) = agent.response_answering(id, |request| editor.answer(request)).await;

    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}\n{}", agent.stderr());
    // The read went through: the model was given the file's text.
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 4, "read, write, command, answer");
    assert!(tool_result(&requests[1].body, "call_r").contains("the answer is 42"), "{}", requests[1].raw_body);
    // The write and the command asked first (the default mode), then ran.
    assert_eq!(editor.requests_for("session/request_permission").len(), 2, "{:?}", editor.methods());
    assert_eq!(std::fs::read_to_string(project.join("answer.txt")).unwrap(), "42\n");
    let ran = tool_result(&requests[3].body, "call_c");
    assert!(ran.contains("lathe-smoke"), "{ran}\n{}", agent.stderr());
    agent.assert_stdout_is_only_jsonrpc();
}
