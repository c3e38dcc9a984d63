//! The processes lathe starts, through the real binary: they never see the
//! secrets lathe knows of (shell commands, local MCP servers, editor
//! terminals), and nothing they started outlives lathe, even when lathe is
//! killed with SIGKILL. Also the `lathe sandbox-exec` trampoline on its own.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use super::mcp::fixture_path;
use crate::support::acp_client::prompt;
use crate::support::clock::poll_until;
use crate::support::editor::FakeEditor;
use crate::support::harness::Harness;
use crate::support::mcp_server::{Fixture, HttpMcpServer};
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

async fn set_mode(h: &mut Harness, session: &str, mode: &str) {
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

/// One process, identified by pid and start time (so a reused pid is not it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Process {
    pid: u32,
    started: u64,
    cmdline: String,
}

/// `(state, ppid, start time)` of a process, from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(String, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text.rsplit_once(") ")?.1.split_whitespace().collect();
    Some((fields[0].to_owned(), fields[1].parse().ok()?, fields[19].parse().ok()?))
}

/// Every live process descended from `root`.
fn descendants(root: u32) -> Vec<Process> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if let Some((_, ppid, _)) = stat(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            queue.push(child);
            if let Some((state, _, started)) = stat(child)
                && state != "Z"
            {
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                found.push(Process { pid: child, started, cmdline });
            }
        }
    }
    found
}

/// Whether the process still runs (a zombie is dead: it only waits to be reaped).
fn alive(process: &Process) -> bool {
    stat(process.pid).is_some_and(|(state, _, started)| started == process.started && state != "Z" && state != "X")
}

/// Issue 11, defect 7: SIGKILL of lathe while a shell command (with a
/// background job) and a stdio MCP server run: all of them are gone shortly
/// after.
#[tokio::test]
async fn nothing_outlives_a_killed_lathe() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("fixture.log");
    let config = format!(
        "[mcp_servers.fx]\ncommand = {:?}\nenv = {{ MCP_FIXTURE_LOG = {:?} }}\n",
        fixture_path(),
        log.display().to_string()
    );
    let mut h = Harness::process(&config, &[]).await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    let marker = h.project.join("started");
    let command = format!("sleep 300 & sleep 300 & echo up > {}; wait", marker.display());
    h.mock.push(tool_call_reply(&[("call_s", "shell", json!({"command": command}))]));
    let _ = prompt(&mut h.agent, &session, "start them").await;
    let lathe = h.agent.pid();
    poll_until("the command and the MCP server start", Duration::from_secs(10), || {
        let running = descendants(lathe);
        marker.exists()
            && running.iter().filter(|p| p.cmdline == "sleep 300 ").count() == 2
            && std::fs::read_to_string(&log).unwrap_or_default().contains("start:")
    })
    .await;
    let running = descendants(lathe);
    assert!(running.iter().any(|p| p.cmdline.contains("mcp_fixture")), "{running:#?}");
    assert!(running.iter().any(|p| p.cmdline.starts_with("sh -c sleep 300")), "{running:#?}");

    h.agent.kill_hard().await;
    poll_until("every process lathe started dies with it", Duration::from_secs(5), || {
        running.iter().all(|process| !alive(process))
    })
    .await;
}

/// Issue 11, defect 5: the secrets lathe knows of (the model's key, the
/// `OPENAI_API_KEY` fallback, an MCP server's bearer token and env entries)
/// and the `[child_env] remove` globs never reach a shell command, an MCP
/// server (which still gets its own entries) or a command in an editor
/// terminal, and so never reach the session log or the model.
#[tokio::test]
async fn children_never_see_the_secrets() {
    let remote = HttpMcpServer::start(Fixture::new(None)).await;
    let config = format!(
        "api_key_env = \"MOCK_API_KEY\"\n\
         [mcp_servers.fx]\ncommand = {:?}\nenv = {{ FX_SECRET = \"fx-own-value\" }}\n\
         [mcp_servers.docs]\nurl = {:?}\nbearer_token_env = \"DOCS_TOKEN\"\n\
         [child_env]\nremove = [\"*_PASSWORD\", \"CLOUD_*\"]\nkeep = [\"CLOUD_REGION\"]\n",
        fixture_path(),
        remote.url()
    );
    let secrets = [
        ("OPENAI_API_KEY", "sk-openai-fallback-secret"),
        ("MOCK_API_KEY", "sk-mock-model-secret"),
        ("DOCS_TOKEN", "docs-bearer-secret"),
        ("FX_SECRET", "fx-inherited-secret"),
        ("DB_PASSWORD", "hunter2-password-secret"),
        ("CLOUD_KEY", "cloud-key-secret"),
    ];
    let mut envs: Vec<(&str, &str)> = secrets.to_vec();
    envs.extend([("CLOUD_REGION", "eu-kept"), ("PLAIN_SETTING", "plain-kept")]);
    let names = "OPENAI_API_KEY MOCK_API_KEY DOCS_TOKEN FX_SECRET DB_PASSWORD CLOUD_KEY CLOUD_REGION PLAIN_SETTING";
    let shell = format!("for name in {names}; do eval \"echo $name=\\${{$name-unset}}\"; done");
    let expected_shell = "OPENAI_API_KEY=unset\nMOCK_API_KEY=unset\nDOCS_TOKEN=unset\nFX_SECRET=unset\n\
                          DB_PASSWORD=unset\nCLOUD_KEY=unset\nCLOUD_REGION=eu-kept\nPLAIN_SETTING=plain-kept";

    // A local shell command and the MCP server.
    let mut h = Harness::process(&config, &envs).await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[
        ("call_s", "shell", json!({"command": shell})),
        ("call_e", "fx__env", json!({"text": names})),
    ]));
    h.mock.push(text_reply("seen"));
    let id = prompt(&mut h.agent, &session, "show me").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let body = h.mock.requests()[1].body.clone();
    assert_eq!(tool_result(&body, "call_s"), format!("Exit code: 0\n{expected_shell}"));
    assert_eq!(
        tool_result(&body, "call_e"),
        "OPENAI_API_KEY unset\nMOCK_API_KEY unset\nDOCS_TOKEN unset\nFX_SECRET=fx-own-value\nDB_PASSWORD unset\n\
         CLOUD_KEY unset\nCLOUD_REGION=eu-kept\nPLAIN_SETTING=plain-kept"
    );
    // The model's key did go where it belongs.
    assert_eq!(h.mock.requests()[0].header("authorization"), Some("Bearer sk-mock-model-secret"));
    assert_no_secret_kept_or_sent(h, &secrets).await;

    // A command in an editor terminal, whose environment (the editor's) has the secrets too.
    let mut h = Harness::process(&config, &envs).await;
    let session = h.session_with(json!({"terminal": true})).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_t", "shell", json!({"command": shell}))]));
    h.mock.push(text_reply("seen"));
    let mut editor = FakeEditor::default();
    editor.terminal_env = envs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
    let id = prompt(&mut h.agent, &session, "show me").await;
    let (_, response) = h.agent.response_answering(id, |request| editor.answer(request)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let created = editor.requests_for("terminal/create");
    assert_eq!(created[0]["params"]["command"], env!("CARGO_BIN_EXE_lathe"), "{}", created[0]);
    assert_eq!(created[0]["params"]["args"][0], "sandbox-exec");
    let body = h.mock.requests()[1].body.clone();
    assert_eq!(tool_result(&body, "call_t"), format!("Exit code: 0\n{expected_shell}"));
    assert_no_secret_kept_or_sent(h, &secrets).await;
}

/// Stops lathe and checks that no secret value is in any file of its data
/// directory (the session logs) or in any request sent to the model.
async fn assert_no_secret_kept_or_sent(mut h: Harness, secrets: &[(&str, &str)]) {
    h.agent.close_stdin();
    h.agent.wait_exit(Duration::from_secs(5)).await.expect("lathe exits on EOF");
    let mut files = vec![h.home.path().join(".local/share/lathe")];
    let mut logs = 0;
    while let Some(path) = files.pop() {
        // Entries that vanish while listed (a temporary file renamed) are skipped.
        if path.is_dir() {
            let Ok(entries) = std::fs::read_dir(&path) else { continue };
            files.extend(entries.flatten().map(|entry| entry.path()));
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else { continue };
        logs += usize::from(path.extension().is_some_and(|ext| ext == "jsonl"));
        let text = String::from_utf8_lossy(&bytes).into_owned();
        for (name, value) in secrets {
            assert!(!text.contains(value), "{name}'s value is in {}", path.display());
        }
    }
    assert!(logs >= 1, "a session log was looked at");
    for request in h.mock.requests() {
        let text = request.body.to_string();
        for (name, value) in secrets {
            assert!(!text.contains(value), "{name}'s value was sent to the model");
        }
    }
}

fn trampoline() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lathe"));
    command.arg("sandbox-exec");
    command
}

/// This process's id, as the trampoline's `--parent`.
fn me() -> String {
    std::process::id().to_string()
}

/// The trampoline exits as its command did, dies of the signal it died of,
/// applies its environment rule, reports a program it cannot start, and is
/// not in `--help`.
#[test]
fn the_trampoline_ends_as_its_command_did() {
    use std::os::unix::process::ExitStatusExt;
    let status = trampoline().args(["--parent", &me(), "--", "sh", "-c", "exit 7"]).status().unwrap();
    assert_eq!(status.code(), Some(7));
    let status = trampoline().args(["--parent", &me(), "--", "sh", "-c", "kill -TERM $$"]).status().unwrap();
    assert_eq!(status.signal(), Some(15), "{status:?}");
    let status = trampoline().args(["--parent", &me(), "--", "sh", "-c", "kill -SEGV $$"]).status().unwrap();
    assert_eq!(status.signal(), Some(11), "{status:?}");

    let output = trampoline()
        .args(["--secret", "SECRET_A", "--remove", "*_TOKEN", "--keep", "GH_TOKEN", "--"])
        .args(["sh", "-c", "echo ${SECRET_A-unset} ${NPM_TOKEN-unset} ${GH_TOKEN-unset}"])
        .envs([("SECRET_A", "a"), ("NPM_TOKEN", "n"), ("GH_TOKEN", "g")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "unset unset g\n");

    let output = trampoline().args(["--parent", &me(), "--", "/nonexistent/program"]).output().unwrap();
    assert_eq!(output.status.code(), Some(127));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot start `/nonexistent/program`"), "{stderr}");
    assert!(output.stdout.is_empty());

    let help = Command::new(env!("CARGO_BIN_EXE_lathe")).arg("--help").output().unwrap();
    assert!(!String::from_utf8_lossy(&help.stdout).contains("sandbox-exec"));
}

/// A signal sent to the trampoline alone reaches its command; one sent to the
/// whole group does not end the trampoline before its command (so a grace
/// period after SIGTERM holds).
#[tokio::test]
async fn the_trampoline_passes_signals_on() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("trapped");
    let script =
        format!("trap 'echo term > {}; exit 3' TERM; echo ready; while :; do sleep 0.05; done", marker.display());
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
        .args(["sandbox-exec", "--parent", &me(), "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line).await.unwrap();
    assert_eq!(line, "ready\n");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(3), "the command trapped the signal and chose its exit");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "term\n");
}

/// A trampoline whose parent is already gone when it starts kills its
/// command's whole group at once (the parent may die before the kernel was
/// asked to tell).
#[tokio::test]
async fn a_trampoline_without_its_parent_stops_at_once() {
    // pid 1 is never our parent.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_lathe"))
        .args(["sandbox-exec", "--parent", "1", "--", "sh", "-c", "sleep 300 & sleep 300"])
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let group = child.id().unwrap().to_string();
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await.unwrap().unwrap();
    assert!(!status.success());
    let in_group = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
            let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
            let Some((_, rest)) = text.rsplit_once(") ") else { return false };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields[2] == group && fields[0] != "Z"
        })
    };
    poll_until("the group is gone", Duration::from_secs(5), || !in_group()).await;
}
