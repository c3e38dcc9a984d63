//! The command sandbox (issue 14), through the real binary: the trampoline
//! `lathe sandbox-exec --sandbox` on its own (writes, a child of a child,
//! TCP against a listener on 127.0.0.1), the auto mode and the request to
//! leave the sandbox, the fallback (forced with `LATHE_SANDBOX_UNAVAILABLE=1`),
//! sandboxed MCP servers and editor terminals.
//!
//! Where the kernel has no Landlock, the tests that need it check the
//! fallback instead (nothing runs as if sandboxed) and say so on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lathe::sandbox::{Enforcement, probe};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::mcp::fixture_path;
use crate::support::acp_client::{agent_text, final_status, prompt, updates_for};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

/// What Landlock enforces here, said once on stderr when it is not everything.
fn enforcement(network: bool) -> Enforcement {
    let status = probe(network);
    if status.enforcement != Enforcement::Full {
        eprintln!("NOTE: the sandbox is not fully enforced here ({}); checking the fallback", status.detail);
    }
    status.enforcement
}

/// A directory outside every path a session's sandbox may write: not in
/// the system temp directory (which is writable), but in Cargo's target dir.
fn outside_dir() -> TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    assert!(!dir.path().starts_with(std::env::temp_dir()), "the target dir is inside the temp dir");
    dir
}

/// `lathe sandbox-exec [--parent <us>] --sandbox --write <writable>... [--no-network] -- sh -c <script>`.
fn trampoline(supervised: bool, writable: &[&Path], network: bool, script: &str, env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lathe"));
    command.arg("sandbox-exec");
    if supervised {
        command.arg("--parent").arg(std::process::id().to_string());
    }
    command.arg("--sandbox");
    for path in writable {
        command.arg("--write").arg(path);
    }
    if !network {
        command.arg("--no-network");
    }
    command.args(["--", "sh", "-c", script]).envs(env.iter().map(|(name, value)| (name, value)));
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes inside the writable path succeed; `touch` outside, `rm` of an
/// outside file, writing `~/.bashrc` and `echo > /etc/...` fail with EACCES
/// and leave the outside untouched, for a child of a child too, supervised
/// or `exec`ed (editor terminals).
#[test]
fn sandboxed_commands_write_only_inside() {
    for supervised in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let outside = outside_dir();
        let home = outside_dir();
        std::fs::write(outside.path().join("kept"), "original").unwrap();
        std::fs::write(home.path().join(".bashrc"), "# mine\n").unwrap();
        let etc = PathBuf::from(format!("/etc/lathe-sandbox-test-{}-{supervised}", std::process::id()));
        let script = format!(
            "touch \"$ROOT/inside\"; echo inside=$?\n\
             touch \"$OUT/new\"; echo touch=$?\n\
             rm -f \"$OUT/kept\"; echo rm=$?\n\
             echo pwned >> ~/.bashrc; echo bashrc=$?\n\
             echo pwned > {etc}; echo etc=$?\n\
             sh -c 'sh -c \"touch \\\"$OUT/grandchild\\\"\"'; echo grandchild=$?\n\
             sh -c 'touch \"$ROOT/child\"'; echo child=$?\n",
            etc = etc.display()
        );
        let env = [("ROOT", root.path()), ("OUT", outside.path()), ("HOME", home.path())];
        let output = trampoline(supervised, &[root.path()], true, &script, &env);
        let etc_written = std::fs::remove_file(&etc).is_ok();
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        if enforcement(true) == Enforcement::None {
            assert_eq!(output.status.code(), Some(127), "{stderr}");
            assert!(stderr.contains("cannot sandbox the command, so it was not run"), "{stderr}");
            assert!(!root.path().join("inside").exists(), "nothing ran");
            continue;
        }
        let codes: Vec<(&str, &str)> = stdout.lines().filter_map(|line| line.split_once('=')).collect();
        let code = |name: &str| codes.iter().find(|(n, _)| *n == name).map(|(_, code)| *code);
        assert_eq!(code("inside"), Some("0"), "{stdout}{stderr}");
        assert_eq!(code("child"), Some("0"), "{stdout}{stderr}");
        for denied in ["touch", "rm", "bashrc", "etc", "grandchild"] {
            assert!(code(denied).is_some_and(|code| code != "0"), "{denied} was allowed: {stdout}{stderr}");
        }
        assert!(stderr.matches("Permission denied").count() >= 5, "EACCES each time: {stderr}");
        assert!(root.path().join("inside").exists() && root.path().join("child").exists());
        assert!(!outside.path().join("new").exists() && !outside.path().join("grandchild").exists());
        assert_eq!(std::fs::read_to_string(outside.path().join("kept")).unwrap(), "original");
        assert_eq!(std::fs::read_to_string(home.path().join(".bashrc")).unwrap(), "# mine\n");
        assert!(!etc_written, "{} was written", etc.display());
    }
}

/// With `network = false` a connect to a listener on 127.0.0.1 fails; with
/// `true` it succeeds.
#[test]
fn network_off_refuses_tcp_to_a_local_listener() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!("exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected'");
    let root = tempfile::tempdir().unwrap();
    let on = trampoline(true, &[root.path()], true, &script, &[]);
    let off = trampoline(true, &[root.path()], false, &script, &[]);
    match enforcement(false) {
        Enforcement::Full => {
            assert_eq!(text(&on.stdout), "connected\n", "{}", text(&on.stderr));
            assert_eq!(text(&off.stdout), "", "connected with the network off");
            assert!(text(&off.stderr).contains("Permission denied"), "{}", text(&off.stderr));
            assert!(!off.status.success());
        }
        Enforcement::Partial => {
            // TCP is what this kernel cannot restrict: nothing is promised.
            assert_eq!(text(&on.stdout), "connected\n", "{}", text(&on.stderr));
        }
        Enforcement::None => assert_eq!(on.status.code(), Some(127)),
    }
}

/// Switches the mode; returns what arrived before the answer (the
/// session's notices, which follow `session/new`, among them).
async fn set_mode(h: &mut Harness, session: &str, mode: &str) -> Vec<Value> {
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (before, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    before
}

async fn run(h: &mut Harness, session: &str, editor: &mut FakeEditor) -> (Vec<Value>, Value) {
    let id = prompt(&mut h.agent, session, "do it").await;
    h.agent.response_answering(id, |request| editor.answer(request)).await
}

fn last_update(messages: &[Value], call: &str) -> Value {
    updates_for(messages, call).into_iter().last().cloned().unwrap_or(Value::Null)
}

/// The option ids of a permission request.
fn option_ids(request: &Value) -> Vec<String> {
    request["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap().to_owned())
        .collect()
}

/// Auto mode: a command runs in the sandbox without a permission request; a
/// write outside comes back as a suspected sandbox denial; the model's
/// request to rerun it outside asks, and runs outside once allowed.
#[tokio::test]
async fn auto_mode_runs_commands_sandboxed_and_asks_to_leave() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    set_mode(&mut h, &session, "auto").await;
    let outside = outside_dir();
    let target = outside.path().join("x");
    let touch = format!("touch {}", target.display());
    h.mock.push(tool_call_reply(&[("call_1", "shell", json!({"command": "git --version > version.txt"}))]));
    h.mock.push(tool_call_reply(&[("call_2", "shell", json!({"command": touch}))]));
    h.mock.push(tool_call_reply(&[("call_3", "shell", json!({"command": touch, "outside_sandbox": true}))]));
    h.mock.push(text_reply("done"));
    let full = enforcement(true) == Enforcement::Full;
    let answers = if full {
        vec![Permission::Select("allow_outside")]
    } else {
        vec![Permission::Select("allow_once"), Permission::Select("reject_once"), Permission::Select("reject_once")]
    };
    let mut editor = FakeEditor::answering(&answers);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let asked = editor.requests_for("session/request_permission");
    if !full {
        // No sandbox to rely on: auto mode asks before every command.
        assert_eq!(asked.len(), 3, "{asked:#?}");
        return;
    }
    assert_eq!(asked.len(), 1, "only leaving the sandbox asks: {asked:#?}");
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_3");
    assert_eq!(option_ids(asked[0]), ["allow_outside", "reject_once", "reject_always"]);
    assert!(asked[0]["params"]["toolCall"]["title"].as_str().unwrap().ends_with("outside the sandbox"), "{}", asked[0]);

    assert!(h.project.join("version.txt").exists(), "the sandboxed command wrote inside");
    assert_eq!(last_update(&before, "call_1")["rawOutput"]["sandboxed"], true);
    let requests = h.mock.chat_requests();
    let denied = tool_result(&requests[2].body, "call_2");
    assert!(denied.contains("Permission denied"), "{denied}");
    assert!(denied.contains("[lathe] This command ran in the sandbox"), "{denied}");
    assert!(denied.contains("outside_sandbox: true"), "{denied}");
    assert!(last_update(&before, "call_2")["rawOutput"]["sandbox_denial_suspected"].is_string());
    assert_eq!(final_status(&before, "call_3"), "completed");
    assert!(target.exists(), "allowed outside, it wrote outside");
    assert!(last_update(&before, "call_3")["rawOutput"].get("sandboxed").is_none());
}

/// In ask mode a command the user allows runs in the sandbox; "Allow
/// outside the sandbox" lets it out.
#[tokio::test]
async fn ask_mode_runs_allowed_commands_sandboxed_unless_let_out() {
    if enforcement(true) != Enforcement::Full {
        return; // the forced-fallback tests below cover this machine
    }
    let mut h = Harness::start().await;
    let session = h.session().await;
    let outside = outside_dir();
    let touch = format!("touch {}", outside.path().join("x").display());
    h.mock.push(tool_call_reply(&[("call_1", "shell", json!({"command": touch}))]));
    h.mock.push(tool_call_reply(&[("call_2", "shell", json!({"command": touch}))]));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once"), Permission::Select("allow_outside")]);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 2);
    assert_eq!(option_ids(asked[0]), ["allow_once", "allow_always", "allow_outside", "reject_once", "reject_always"]);
    assert_eq!(final_status(&before, "call_1"), "failed", "allowed, but in the sandbox");
    assert_eq!(final_status(&before, "call_2"), "completed");
    assert!(outside.path().join("x").exists());
}

/// The fallback, forced: auto mode asks before each command, the user is
/// told once, and nothing offers to leave a sandbox there is not.
#[tokio::test]
async fn without_a_sandbox_auto_mode_asks_and_says_so_once() {
    let mut h = Harness::with_config_and_env("", &[("LATHE_SANDBOX_UNAVAILABLE", "1")]).await;
    let session = h.session().await;
    let mut seen = set_mode(&mut h, &session, "auto").await;
    for (call, file) in [("call_1", "a.txt"), ("call_2", "b.txt")] {
        h.mock.push(tool_call_reply(&[(call, "shell", json!({"command": format!("touch {file}")}))]));
        h.mock.push(text_reply("ok"));
        let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
        let (before, response) = run(&mut h, &session, &mut editor).await;
        assert_eq!(response["result"]["stopReason"], "end_turn");
        let asked = editor.requests_for("session/request_permission");
        assert_eq!(asked.len(), 1, "auto mode asks without a sandbox");
        assert_eq!(option_ids(asked[0]), ["allow_once", "allow_always", "reject_once", "reject_always"]);
        assert_eq!(final_status(&before, call), "completed");
        assert!(h.project.join(file).exists());
        seen.extend(before);
    }
    let text = agent_text(&seen);
    assert_eq!(text.matches("Commands run without a sandbox").count(), 1, "{text}");
    assert!(text.contains("LATHE_SANDBOX_UNAVAILABLE=1"), "{text}");
}

/// The fallback, forced, with `mode = "required"`: commands are refused in
/// every mode, without asking, and sandboxed MCP servers do not start.
#[tokio::test]
async fn without_a_sandbox_required_refuses_commands() {
    let config =
        format!("[sandbox]\nmode = \"required\"\n[mcp_servers.fx]\ncommand = {:?}\nsandbox = true\n", fixture_path());
    let mut h = Harness::with_config_and_env(&config, &[("LATHE_SANDBOX_UNAVAILABLE", "1")]).await;
    let session = h.session().await;
    let mut seen = Vec::new();
    for (mode, call) in [("ask", "call_1"), ("full-auto", "call_2")] {
        seen.extend(set_mode(&mut h, &session, mode).await);
        h.mock.push(tool_call_reply(&[(call, "shell", json!({"command": format!("touch {call}")}))]));
        h.mock.push(text_reply("ok"));
        let mut editor = FakeEditor::default();
        let (before, _) = run(&mut h, &session, &mut editor).await;
        assert!(editor.requests_for("session/request_permission").is_empty(), "{mode}: refused, not asked");
        assert_eq!(final_status(&before, call), "failed");
        assert!(!h.project.join(call).exists(), "{mode}: it ran");
        seen.extend(before);
    }
    let requests = h.mock.chat_requests();
    let refused = tool_result(&requests[1].body, "call_1");
    assert!(refused.contains("the sandbox is required"), "{refused}");
    let text = agent_text(&seen);
    assert_eq!(text.matches("Commands are refused").count(), 1, "{text}");
    assert!(text.contains("the sandbox is not available"), "the MCP server's failure says why: {text}");
    assert!(!requests.iter().any(|r| r.body.to_string().contains("fx__echo")), "the sandboxed server did not start");
}

/// A local MCP server with `sandbox = true` runs under Landlock: its
/// process has `no_new_privs`, which the restriction sets (a server without
/// it does not), and its tools work.
#[tokio::test]
async fn sandboxed_mcp_servers_run_restricted() {
    if enforcement(true) == Enforcement::None {
        return; // `without_a_sandbox_required_refuses_commands` covers the refusal
    }
    let config = format!(
        "[mcp_servers.boxed]\ncommand = {fixture:?}\nsandbox = true\n[mcp_servers.free]\ncommand = {fixture:?}\n",
        fixture = fixture_path()
    );
    let mut h = Harness::process(&config, &[]).await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_1", "boxed__echo", json!({"text": "hi"}))]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::default();
    let (before, _) = run(&mut h, &session, &mut editor).await;
    assert_eq!(final_status(&before, "call_1"), "completed");
    // The servers are the children of trampolines started by this lathe.
    let ppid = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let fixture = fixture_path().display().to_string();
    let mut no_new_privs = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = text(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default());
        if cmdline.starts_with(&fixture) && ppid(pid).and_then(ppid) == Some(h.agent.pid()) {
            // A process that ended since it was listed is not counted.
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
            no_new_privs.push(status.contains("NoNewPrivs:\t1"));
        }
    }
    no_new_privs.sort();
    assert_eq!(no_new_privs, [false, true], "one restricted server, one free");
}

/// An editor terminal runs the command through the trampoline with the
/// policy in its arguments; the sandbox holds in the editor's process.
#[tokio::test]
async fn editor_terminals_carry_the_sandbox() {
    let mut h = Harness::start().await;
    let session = h.session_with(json!({"terminal": true})).await;
    let outside = outside_dir();
    let command = format!("touch inside.txt; touch {}", outside.path().join("x").display());
    h.mock.push(tool_call_reply(&[("call_1", "shell", json!({"command": command}))]));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (_, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let created = editor.requests_for("terminal/create");
    assert_eq!(created.len(), 1);
    let args: Vec<&str> =
        created[0]["params"]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    if enforcement(true) == Enforcement::None {
        assert!(!args.contains(&"--sandbox"), "no sandbox is claimed: {args:?}");
        return;
    }
    assert_eq!(args[0], "sandbox-exec");
    let project = h.project.display().to_string();
    assert!(args.windows(2).any(|pair| pair == ["--write", project.as_str()]), "{args:?}");
    assert!(args.contains(&"--sandbox"), "{args:?}");
    assert_eq!(args[args.len() - 3..], ["sh", "-c", command.as_str()]);
    assert!(h.project.join("inside.txt").exists());
    assert!(!outside.path().join("x").exists(), "the editor's process was sandboxed");
}
