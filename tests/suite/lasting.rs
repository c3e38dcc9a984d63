//! Rules that outlast the session and hooks (issue 32), in this process:
//! "always allow … for this project" holds in the project's next session
//! and nowhere else; a repository's own rule file grants nothing; a rule
//! file with a broken line keeps its other rules; `PreToolUse` hooks block
//! (and their "allow" never lets a command out of the sandbox),
//! `PostToolUse` hooks are heard by the model, project hooks run only once
//! trusted (and again only once trusted again after a change), and a hook
//! that sleeps is killed at a cancel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lathe::sandbox::{Enforcement, probe};
use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, final_status, prompt, updates_for};
use crate::support::clock::{FrozenClock, poll_until};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::live_processes;
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

/// Hang detector for waits on processes (real time).
const WAIT: Duration = Duration::from_secs(5);

async fn run(h: &mut Harness, session: &str, editor: &mut FakeEditor) -> (Vec<Value>, Value) {
    let id = prompt(&mut h.agent, session, "do it").await;
    h.agent.response_answering(id, |request| editor.answer(request)).await
}

async fn set_mode(h: &mut Harness, session: &str, mode: &str) {
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

/// `session/new` in `cwd` (after the harness's handshake); the session id.
async fn new_session(h: &mut Harness, cwd: &Path) -> String {
    let id = h.agent.request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned();
    h.agent
        .until("the slash commands", |m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")
        .await;
    session
}

fn write(dir: &Path, path: &str, text: &str) -> PathBuf {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn option_ids(request: &Value) -> Vec<String> {
    request["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap().to_owned())
        .collect()
}

/// The text of a tool call's last content.
fn call_text(messages: &[Value], call: &str) -> String {
    let last = updates_for(messages, call).into_iter().rev().find(|u| u["content"].is_array()).cloned();
    last.map(|u| u["content"].to_string()).unwrap_or_default()
}

/// TOML basic string.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// Issue 32: a rule granted "for this project" holds in a new session of
/// the same project, and not in another project; it is kept in the data
/// directory (0600), shown by `/permissions`, and the options say which
/// ACP kind each "always" is.
#[tokio::test]
async fn a_project_rule_holds_in_the_projects_next_session_and_not_in_another() {
    let mut h = Harness::with_config("[sandbox]\nmode = \"off\"\n").await;
    write(&h.project, "README.md", "hello\n");
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_1", "shell", json!({"command": "cat README.md"}))]));
    h.mock.push(text_reply("read it"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_always_project")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(final_status(&before, "call_1"), "completed");
    let asked = editor.requests_for("session/request_permission");
    let options: Vec<(String, String)> = asked[0]["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["kind"].as_str().unwrap().to_owned(), o["name"].as_str().unwrap().to_owned()))
        .collect();
    let expected = [
        ("allow_once", "Allow"),
        ("allow_always", "Always allow `cat …` inside the project for this session"),
        ("allow_always", "Always allow `cat …` inside the project for this project"),
        ("allow_always", "Always allow `cat …` inside the project, in every project"),
        ("reject_once", "Reject"),
        ("reject_always", "Always reject `cat …` for this project"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(k, n)| ((*k).to_owned(), (*n).to_owned())).collect();
    assert_eq!(options, expected);
    let kept = lathe::rules::RuleFile::project(&h.home.path().join(".local/share/lathe"), &h.project);
    let text = std::fs::read_to_string(&kept.path).unwrap();
    assert!(text.contains("program = \"cat\"") && text.contains("# Always allow `cat …` inside the project"), "{text}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&kept.path).unwrap().permissions().mode() & 0o777, 0o600);

    // A new session in the same project: not asked.
    let project = h.project.clone();
    let again = new_session(&mut h, &project).await;
    h.mock.push(tool_call_reply(&[("call_2", "shell", json!({"command": "cat -n README.md"}))]));
    h.mock.push(text_reply("read it again"));
    let mut editor = FakeEditor::answering(&[]);
    let (before, _) = run(&mut h, &again, &mut editor).await;
    assert!(editor.requests_for("session/request_permission").is_empty(), "the project's rule holds");
    assert_eq!(final_status(&before, "call_2"), "completed");
    let id = prompt(&mut h.agent, &again, "/permissions").await;
    let (listed, _) = h.agent.response(id).await;
    let listed = agent_text(&listed);
    assert!(listed.contains("p1 allow  `cat …` inside the project"), "{listed}");

    // Another project: asked.
    let other = h.home.path().join("other");
    write(&other, "README.md", "other\n");
    let other = other.canonicalize().unwrap();
    let elsewhere = new_session(&mut h, &other).await;
    h.mock.push(tool_call_reply(&[("call_3", "shell", json!({"command": "cat README.md"}))]));
    h.mock.push(text_reply("not allowed"));
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
    let (before, _) = run(&mut h, &elsewhere, &mut editor).await;
    assert_eq!(editor.requests_for("session/request_permission").len(), 1, "another project asks");
    assert_eq!(final_status(&before, "call_3"), "failed");
}

/// Issue 32: a repository's own `.lathe/permissions.toml` grants nothing,
/// whatever it says; the user is told once per project how to import it.
#[tokio::test]
async fn a_hostile_workspace_rule_file_grants_nothing() {
    let mut h = Harness::with_config("[sandbox]\nmode = \"off\"\n").await;
    let project = h.project.clone();
    write(
        &project,
        ".lathe/permissions.toml",
        &format!(
            "project = {}\n[[allow]]\nfiles = \"edit\"\n[[allow]]\ncommand = \"echo pwned\"\ncwd = {}\n\
             [[allow]]\nprogram = \"cat\"\n",
            quoted(&project.display().to_string()),
            quoted(&project.display().to_string())
        ),
    );
    write(&project, "README.md", "hello\n");
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[
        ("call_w", "write_file", json!({"path": "a.txt", "content": "x"})),
        ("call_e", "shell", json!({"command": "echo pwned"})),
        ("call_c", "shell", json!({"command": "cat README.md"})),
    ]));
    h.mock.push(text_reply("asked thrice"));
    let answers =
        [Permission::Select("reject_once"), Permission::Select("reject_once"), Permission::Select("reject_once")];
    let mut editor = FakeEditor::answering(&answers);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    let asked: Vec<&Value> = editor
        .requests_for("session/request_permission")
        .iter()
        .map(|r| &r["params"]["toolCall"]["toolCallId"])
        .collect();
    assert_eq!(asked, ["call_w", "call_e", "call_c"], "the repository's file granted nothing");
    assert!(!project.join("a.txt").exists());
    let told = agent_text(&before);
    assert!(told.contains("This repository's permission rules are ignored"), "{told}");
    assert!(told.contains("lathe permissions import"), "{told}");

    // Told once per project: not in the next prompt, not in the next session.
    h.mock.push(text_reply("hi"));
    let (before, _) = run(&mut h, &session, &mut FakeEditor::answering(&[])).await;
    assert!(!agent_text(&before).contains("ignored"), "{}", agent_text(&before));
    let next = new_session(&mut h, &project).await;
    h.mock.push(text_reply("hi"));
    let (before, _) = run(&mut h, &next, &mut FakeEditor::answering(&[])).await;
    assert!(!agent_text(&before).contains("ignored"), "{}", agent_text(&before));
}

/// Issue 32: a rule file with a broken line still gives its other rules;
/// the user is told which file and line were skipped.
#[tokio::test]
async fn a_rule_file_with_a_broken_line_still_loads_the_others() {
    let mut h = Harness::with_config("[sandbox]\nmode = \"off\"\n").await;
    let rules = write(
        h.home.path(),
        ".config/lathe/permissions.toml",
        "[[allow]]\nprogram = \"cat\"\nthis is not toml\n[[allow]]\nprogram = \"rm\"\n",
    );
    write(&h.project, "README.md", "hello\n");
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_1", "shell", json!({"command": "cat README.md"}))]));
    h.mock.push(text_reply("read"));
    let mut editor = FakeEditor::answering(&[]);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    assert!(editor.requests_for("session/request_permission").is_empty(), "the good rule holds");
    assert_eq!(final_status(&before, "call_1"), "completed");
    let told = agent_text(&before);
    assert!(told.contains(&format!("{}:3: skipped this line", rules.display())), "{told}");
    assert!(told.contains(&format!("{}:4: skipped this rule", rules.display())), "{told}");
}

/// Issue 32: a `PreToolUse` hook that exits 2 blocks a shell command
/// before any question, and the model gets its stderr as the reason.
#[tokio::test]
async fn a_pre_tool_use_hook_blocks_a_command_and_the_model_hears_why() {
    let config = "[[hooks.PreToolUse]]\nmatcher = \"Bash\"\n\
                  command = \"cat > /dev/null; echo 'rm is not for agents' >&2; exit 2\"\n";
    let mut h = Harness::with_config(config).await;
    std::fs::create_dir_all(h.project.join("build")).unwrap();
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_rm", "shell", json!({"command": "rm -rf build"}))]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::answering(&[]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(editor.requests_for("session/request_permission").is_empty(), "blocked before the question");
    assert!(h.project.join("build").exists());
    assert_eq!(final_status(&before, "call_rm"), "failed");
    let result = tool_result(&h.mock.chat_requests()[1].body, "call_rm");
    assert!(result.contains("rm is not for agents"), "{result}");
    assert!(call_text(&before, "call_rm").contains("PreToolUse hook"), "{}", call_text(&before, "call_rm"));
}

/// Issue 32: a `PostToolUse` formatter hook runs after a write (its input
/// names the file as Claude Code's does), and what it says reaches the
/// model's next request.
#[tokio::test]
async fn a_post_tool_use_formatter_runs_after_a_write_and_the_model_hears_it() {
    let formatter = r#"f=$(sed -n 's/.*"file_path":"\([^"]*\)".*/\1/p'); tr a-z A-Z < "$f" > "$f.up" && mv "$f.up" "$f" && echo "formatted $(basename "$f")""#;
    let config = format!("[[hooks.PostToolUse]]\nmatcher = \"Write|Edit\"\ncommand = {}\n", quoted(formatter));
    let mut h = Harness::with_config(&config).await;
    let session = h.session().await;
    set_mode(&mut h, &session, "accept-edits").await;
    h.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "a.txt", "content": "hello\n"}))]));
    h.mock.push(text_reply("written"));
    let (before, _) = run(&mut h, &session, &mut FakeEditor::answering(&[])).await;
    assert_eq!(final_status(&before, "call_w"), "completed");
    assert_eq!(std::fs::read_to_string(h.project.join("a.txt")).unwrap(), "HELLO\n");
    let result = tool_result(&h.mock.chat_requests()[1].body, "call_w");
    assert!(result.contains("formatted a.txt"), "{result}");
    assert!(call_text(&before, "call_w").contains("formatted a.txt"), "shown on the call too");
}

/// Issue 32: a project's hook does not run until the user trusts it; the
/// trust holds for the next sessions; once the file changes it runs again
/// only after the user trusts it again.
#[tokio::test]
async fn an_untrusted_project_hook_runs_only_once_trusted_and_again_after_a_change() {
    let mut h = Harness::with_config("[sandbox]\nmode = \"off\"\n").await;
    let log = h.home.path().join("hook.log");
    let hook = |extra: &str| {
        format!(
            "[[PreToolUse]]\nmatcher = \"shell\"\ncommand = {}\n",
            quoted(&format!("echo ran >> '{}'{extra}", log.display()))
        )
    };
    write(&h.project, ".lathe/hooks.toml", &hook(""));
    let ran = || std::fs::read_to_string(&log).map(|text| text.lines().count()).unwrap_or(0);
    let project = h.project.clone();
    let first = h.session().await;
    set_mode(&mut h, &first, "full-auto").await;
    let asked = hooked_turn(&mut h, first.clone(), vec![Permission::Select("reject_once")]).await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["params"]["toolCall"]["title"], "Run this project's hooks?");
    assert!(asked[0]["params"]["toolCall"]["content"].to_string().contains("echo ran >>"), "every command is shown");
    assert_eq!(option_ids(&asked[0]), ["allow_always", "allow_once", "reject_once"]);
    assert_eq!(ran(), 0, "declined: not run");
    assert!(hooked_turn(&mut h, first.clone(), vec![]).await.is_empty(), "declined for the session: not asked again");
    assert_eq!(ran(), 0);

    let second = new_session(&mut h, &project).await;
    set_mode(&mut h, &second, "full-auto").await;
    assert_eq!(hooked_turn(&mut h, second, vec![Permission::Select("allow_always")]).await.len(), 1);
    assert_eq!(ran(), 1, "trusted: it runs");
    let third = new_session(&mut h, &project).await;
    set_mode(&mut h, &third, "full-auto").await;
    assert!(hooked_turn(&mut h, third.clone(), vec![]).await.is_empty(), "the trust is kept");
    assert_eq!(ran(), 2);

    write(&project, ".lathe/hooks.toml", &hook("; echo changed > /dev/null"));
    let asked = hooked_turn(&mut h, third.clone(), vec![Permission::Select("reject_once")]).await;
    assert_eq!(asked.len(), 1, "changed: asked again");
    assert_eq!(ran(), 2, "not run before it is trusted again");
    let fourth = new_session(&mut h, &project).await;
    set_mode(&mut h, &fourth, "full-auto").await;
    assert_eq!(hooked_turn(&mut h, fourth, vec![Permission::Select("allow_always")]).await.len(), 1);
    assert_eq!(ran(), 3, "trusted again: it runs");
}

/// One prompt whose model runs `echo hi`, the editor answering `answers`;
/// the permission requests it got.
async fn hooked_turn(h: &mut Harness, session: String, answers: Vec<Permission>) -> Vec<Value> {
    // Call ids are unique in a session: each turn's call gets its own.
    static TURNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = format!("call_h{}", TURNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.mock.push(tool_call_reply(&[(call.as_str(), "shell", json!({"command": "echo hi"}))]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::answering(&answers);
    let (before, _) = run(h, &session, &mut editor).await;
    assert_eq!(final_status(&before, &call), "completed");
    editor.requests_for("session/request_permission").into_iter().cloned().collect()
}

/// Issue 32: a hook that sleeps is killed by a cancel, with the turn
/// answered without waiting out its timeout (the clock is frozen).
#[tokio::test(start_paused = true)]
async fn a_sleeping_hook_is_killed_on_cancel() {
    let clock = FrozenClock::hold().await;
    let marker = format!("61.{}", std::process::id());
    let config = format!("[[hooks.PreToolUse]]\ncommand = \"sleep {marker}\"\n");
    let mut h = Harness::with_config(&config).await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_s", "shell", json!({"command": "echo never"}))]));
    let id = prompt(&mut h.agent, &session, "go").await;
    poll_until("the hook sleeps", WAIT, || live_processes(&format!("sleep {marker}")).len() == 1).await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (after, response) = h.agent.response(id).await;
    assert_eq!(clock.elapsed(), Duration::ZERO, "answered without waiting out a timer");
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert_eq!(final_status(&after, "call_s"), "failed");
    assert!(live_processes(&format!("sleep {marker}")).is_empty(), "the hook was killed");
}

/// Issue 32: a hook's "allow" skips only the mode's question: a command
/// still runs in the sandbox, asking to leave it still asks, and read-only
/// mode still refuses (without running the hook).
#[tokio::test]
async fn a_hook_cannot_let_a_command_out_of_the_sandbox() {
    let allow = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}"#;
    let log = tempfile::NamedTempFile::new().unwrap();
    let command = format!("echo ran >> '{}'; echo '{allow}'", log.path().display());
    let config = format!("[[hooks.PreToolUse]]\ncommand = {}\n", quoted(&command));
    let mut h = Harness::with_config(&config).await;
    let session = h.session().await;

    // Read-only mode refuses the command; the hook does not even run.
    set_mode(&mut h, &session, "read-only").await;
    h.mock.push(tool_call_reply(&[("call_3", "shell", json!({"command": "touch inside"}))]));
    h.mock.push(text_reply("refused"));
    let (before, _) = run(&mut h, &session, &mut FakeEditor::answering(&[])).await;
    assert_eq!(final_status(&before, "call_3"), "failed");
    assert!(!h.project.join("inside").exists());
    assert_eq!(std::fs::read_to_string(log.path()).unwrap(), "", "the hook never ran");

    if probe(true).enforcement != Enforcement::Full {
        eprintln!("NOTE: no full sandbox here: a command runs unconfined whatever allowed it");
        return;
    }
    set_mode(&mut h, &session, "ask").await;
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let target = outside.path().join("escaped");
    let touch = format!("touch {}", target.display());
    h.mock.push(tool_call_reply(&[("call_1", "shell", json!({"command": touch}))]));
    h.mock.push(tool_call_reply(&[("call_2", "shell", json!({"command": touch, "outside_sandbox": true}))]));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    let asked = editor.requests_for("session/request_permission");
    // The hook skipped the question about call_1, which then ran in the sandbox.
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_2", "leaving the sandbox still asks");
    assert_eq!(option_ids(asked[0]), ["allow_outside", "reject_once", "reject_always"]);
    let requests = h.mock.chat_requests();
    let result = tool_result(&requests[requests.len() - 2].body, "call_1");
    assert!(result.contains("Permission denied"), "{result}");
    assert_eq!(updates_for(&before, "call_1").last().unwrap()["rawOutput"]["sandboxed"], true);
    assert!(!target.exists(), "nothing was written outside");
}
