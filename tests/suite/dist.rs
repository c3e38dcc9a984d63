//! lathe as users get it: the binary of a release archive (`cargo xtask
//! check` extracts it and points `LATHE_DIST_BIN` at it), or, without that
//! variable, this build's binary. With an empty environment (`env -i`: no
//! `HOME`, no `PATH`, no locale, as an editor on another distribution may
//! start it) it says what it is and serves one ACP turn against the mock
//! model: `initialize`, `session/new`, and a prompt whose model reads a file
//! and then writes one.

use std::path::PathBuf;

use serde_json::json;
use tokio::process::Command;

use crate::support::acp_client::{Agent, handshake, prompt};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::mock_openai::{MockOpenAi, text_reply, tool_call_reply, tool_result};
use crate::support::write_config;

/// The binary under test: `$LATHE_DIST_BIN`, else this build's.
fn binary() -> PathBuf {
    std::env::var_os("LATHE_DIST_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lathe")), PathBuf::from)
}

#[test]
fn with_an_empty_environment_it_says_what_it_is() {
    let output = std::process::Command::new(binary()).arg("--version").env_clear().output().unwrap();
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
async fn with_an_empty_environment_it_serves_a_turn_that_reads_and_writes() {
    let mock = MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let project = project.canonicalize().unwrap();
    std::fs::write(project.join("notes.txt"), "the answer is 42\n").unwrap();
    let config = write_config(home.path(), &mock.base_url(), "");
    mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "notes.txt"}))]));
    mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "answer.txt", "content": "42\n"}))]));
    mock.push(text_reply("Wrote answer.txt."));

    let mut command = Command::new(binary());
    command
        .env_clear()
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(home.path().join("data"))
        .current_dir(&project);
    let mut agent = Agent::spawn_command(command);
    let session = handshake(&mut agent, json!({}), &project).await;
    let id = prompt(&mut agent, &session, "put the answer from notes.txt in answer.txt").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (_, response) = agent.response_answering(id, |request| editor.answer(request)).await;

    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}\n{}", agent.stderr());
    // The read went through: the model was given the file's text.
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 3, "read, write, answer");
    assert!(tool_result(&requests[1].body, "call_r").contains("the answer is 42"), "{}", requests[1].raw_body);
    // The write asked first (the default mode), then landed.
    assert_eq!(editor.requests_for("session/request_permission").len(), 1, "{:?}", editor.methods());
    assert_eq!(std::fs::read_to_string(project.join("answer.txt")).unwrap(), "42\n");
    agent.assert_stdout_is_only_jsonrpc();
}
