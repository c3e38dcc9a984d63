//! Process hygiene and a misbehaving client, through the real binary: on EOF,
//! SIGTERM, SIGINT or SIGHUP the agent cancels its turns, kills every process
//! group its shell commands started, releases editor terminals, answers the
//! pending prompt, and exits 0 within a second; shell children never write to
//! the agent's stdout and read EOF from stdin; a client that stops reading our
//! stdout or never answers a permission request cannot wedge the agent.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::support::acp_client::{Answer, prompt};
use crate::support::editor::FakeEditor;
use crate::support::harness::Harness;
use crate::support::mock_openai::{MockOpenAi, Reply, Step, ev_role, ev_text, text_reply, tool_call_reply};
use crate::support::{live_processes, write_config};

/// The bound on shutdown the issue asks for.
const EXIT_BOUND: Duration = Duration::from_secs(1);

/// How the agent is told to stop.
#[derive(Debug, Clone, Copy)]
enum Stop {
    Eof,
    Signal(Signal),
}

impl Stop {
    fn apply(self, h: &mut Harness) {
        match self {
            Stop::Eof => h.agent.close_stdin(),
            Stop::Signal(signal) => {
                let pid = Pid::from_raw(i32::try_from(h.agent.pid()).unwrap());
                kill(pid, signal).unwrap();
            }
        }
    }
}

/// A `sleep` argument no other test uses, nor a prefix of one: `60.0<pid><n>`
/// (the cancel test in tools.rs uses `60.<pid>`, which never starts with 0).
fn unique_sleep() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!("60.0{}{:03}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn wait_until(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits up to half a second for every process matching `pattern` to die;
/// kills the survivors (by pid) and fails if any remain.
async fn assert_none_survive(pattern: &str) {
    let started = Instant::now();
    loop {
        let alive = live_processes(pattern);
        if alive.is_empty() {
            return;
        }
        if started.elapsed() > Duration::from_millis(500) {
            for pid in &alive {
                let _ = kill(Pid::from_raw(i32::try_from(*pid).unwrap()), Signal::SIGKILL);
            }
            panic!("processes outlived the agent: {alive:?} ({pattern})");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn set_mode(h: &mut Harness, session: &str, mode: &str) {
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

/// Reads messages until one satisfies `found`, answering the agent's requests
/// with `editor` on the way; returns it.
async fn wait_for_message(h: &mut Harness, editor: &mut FakeEditor, found: impl Fn(&Value) -> bool) -> Value {
    loop {
        let Some(message) = h.agent.next_message(Duration::from_secs(5)).await else {
            panic!("the awaited message never came\n--- agent stderr ---\n{}", h.agent.stderr());
        };
        if message.get("id").is_some()
            && message.get("method").is_some()
            && let Answer::Result(result) = editor.answer(&message)
        {
            h.agent.reply(&message["id"], result).await;
        }
        if found(&message) {
            return message;
        }
    }
}

/// Starts a local shell command that leaves two `sleep`s running (one in the
/// background, one in the foreground), stops the agent with `stop`, and checks
/// the prompt was answered `cancelled`, the agent exited 0 within the bound,
/// and neither sleep survived.
async fn shutdown_kills_shell_children(stop: Stop) {
    let mut h = Harness::start().await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    let sleep = format!("sleep {}", unique_sleep());
    let command = format!("{sleep} & {sleep}; echo never");
    h.mock.push(tool_call_reply(&[("call_s", "shell", json!({"command": command}))]));
    let id = prompt(&mut h.agent, &session, "wait a minute").await;
    let mut editor = FakeEditor::default();
    wait_for_message(&mut h, &mut editor, |m| m["params"]["update"]["status"] == "in_progress").await;
    let pattern = format!("{sleep} ");
    wait_until("both sleeps start", Duration::from_secs(2), || live_processes(&pattern).len() == 2).await;

    let stopped_at = Instant::now();
    stop.apply(&mut h);
    // Flushed before exit: the pending prompt was answered.
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{stop:?}: {response}");
    let status = h.agent.wait_exit(Duration::from_secs(3)).await.expect("the agent exits");
    let took = stopped_at.elapsed();
    // SIGKILL was sent to the group before the agent exited; give the kernel
    // a moment to finish the deliveries. (Checked first: it also cleans up.)
    assert_none_survive(&pattern).await;
    assert!(status.success(), "{stop:?}: exit status {status:?}\n{}", h.agent.stderr());
    assert!(took < EXIT_BOUND, "{stop:?}: took {took:?}");
    h.agent.assert_stdout_is_only_jsonrpc();
    assert!(!h.agent.stderr().contains("panicked"), "{}", h.agent.stderr());
}

#[tokio::test]
async fn eof_kills_shell_children_and_exits() {
    shutdown_kills_shell_children(Stop::Eof).await;
}

#[tokio::test]
async fn sigterm_kills_shell_children_and_exits() {
    shutdown_kills_shell_children(Stop::Signal(Signal::SIGTERM)).await;
}

#[tokio::test]
async fn sigint_kills_shell_children_and_exits() {
    shutdown_kills_shell_children(Stop::Signal(Signal::SIGINT)).await;
}

#[tokio::test]
async fn sighup_kills_shell_children_and_exits() {
    shutdown_kills_shell_children(Stop::Signal(Signal::SIGHUP)).await;
}

/// A command running in an editor terminal: shutting down releases the
/// terminal (`terminal/release` also kills its command) before the prompt's
/// answer and the exit.
async fn shutdown_releases_client_terminals(stop: Stop) {
    let mut h = Harness::start().await;
    let session = h.session_with(json!({"terminal": true})).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_t", "shell", json!({"command": "sleep 60"}))]));
    let id = prompt(&mut h.agent, &session, "wait").await;
    let mut editor = FakeEditor::default();
    let waiting = wait_for_message(&mut h, &mut editor, |m| m["method"] == "terminal/wait_for_exit").await;
    let terminal = waiting["params"]["terminalId"].clone();

    let stopped_at = Instant::now();
    stop.apply(&mut h);
    // No answers: after EOF the agent could not read them anyway.
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{stop:?}: {response}");
    let released: Vec<&Value> = before.iter().filter(|m| m["method"] == "terminal/release").collect();
    assert_eq!(released.len(), 1, "{stop:?}: one terminal/release before the answer: {before:?}");
    assert_eq!(released[0]["params"], json!({"sessionId": session, "terminalId": terminal}));
    let status = h.agent.wait_exit(Duration::from_secs(3)).await.expect("the agent exits");
    assert!(status.success(), "{stop:?}: exit status {status:?}\n{}", h.agent.stderr());
    assert!(stopped_at.elapsed() < EXIT_BOUND, "{stop:?}: took {:?}", stopped_at.elapsed());
}

#[tokio::test]
async fn eof_releases_client_terminals() {
    shutdown_releases_client_terminals(Stop::Eof).await;
}

#[tokio::test]
async fn sigterm_releases_client_terminals() {
    shutdown_releases_client_terminals(Stop::Signal(Signal::SIGTERM)).await;
}

/// Children write to their own pipes, never to the agent's stdout (even
/// through `/dev/stdout` or `/proc/self/fd/1`); their stdin is `/dev/null`.
#[tokio::test]
async fn children_neither_inherit_stdout_nor_read_stdin() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    let command = "echo plain-echo; echo via-dev-stdout > /dev/stdout; echo via-proc-fd1 > /proc/self/fd/1; \
                   echo via-stderr >&2; echo \"fd0=$(readlink /proc/$$/fd/0)\"; \
                   echo \"fd1=$(readlink /proc/$$/fd/1)\"; cat; echo \"cat:$?\"; \
                   echo \"env:$TERM:$NO_COLOR:$PAGER:$GIT_TERMINAL_PROMPT\"";
    h.mock.push(tool_call_reply(&[("call_io", "shell", json!({"command": command}))]));
    h.mock.push(text_reply("seen"));
    let started = Instant::now();
    let id = prompt(&mut h.agent, &session, "run it").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(started.elapsed() < Duration::from_secs(2), "`cat` did not wait for input: {:?}", started.elapsed());

    let body = &h.mock.requests()[1].body;
    let result = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_io")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result in {body}"))
        .to_owned();
    for line in ["plain-echo", "via-dev-stdout", "via-proc-fd1", "via-stderr", "fd0=/dev/null", "cat:0"] {
        assert!(result.lines().any(|l| l == line), "{line:?} missing from the tool result:\n{result}");
    }
    assert!(result.contains("env:dumb:1:cat:0"), "the documented environment:\n{result}");
    let agent_stdout = std::fs::read_link(format!("/proc/{}/fd/1", h.agent.pid())).unwrap();
    let child_stdout = result.lines().find_map(|l| l.strip_prefix("fd1=")).unwrap();
    assert!(child_stdout.starts_with("pipe:"), "{result}");
    assert_ne!(Path::new(child_stdout), agent_stdout, "the child's stdout is not the agent's");
    h.agent.assert_stdout_is_only_jsonrpc();
    for line in h.agent.raw_stdout_lines() {
        assert!(!line.starts_with("plain-echo") && !line.starts_with("via-"), "{line}");
    }
}

/// A client that never answers a permission request, then closes our stdin:
/// the question is withdrawn, the prompt answered `cancelled`, and the agent
/// exits 0 within the bound.
#[tokio::test]
async fn eof_ends_a_turn_waiting_for_permission() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_p", "write_file", json!({"path": "f.txt", "content": "x"}))]));
    let id = prompt(&mut h.agent, &session, "write it").await;
    let mut editor = FakeEditor::default(); // ignores permission requests
    let asked = wait_for_message(&mut h, &mut editor, |m| m["method"] == "session/request_permission").await;
    // The turn waits for the answer rather than deciding by itself.
    assert!(h.agent.next_message(Duration::from_millis(200)).await.is_none(), "the turn waits");

    let closed_at = Instant::now();
    h.agent.close_stdin();
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let withdrawn = before.iter().find(|m| m["method"] == "$/cancel_request").expect("$/cancel_request sent");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"]);
    let status = h.agent.wait_exit(Duration::from_secs(3)).await.expect("the agent exits");
    assert!(status.success(), "exit status {status:?}\n{}", h.agent.stderr());
    assert!(closed_at.elapsed() < EXIT_BOUND, "took {:?}", closed_at.elapsed());
    assert!(!h.project.join("f.txt").exists());
}

/// A client that closes its end of our stdout while we stream: the next write
/// fails (EPIPE), and the agent shuts down and exits 0 instead of spinning or
/// panicking, even though its stdin stays open. The model stream is closed.
#[tokio::test]
async fn a_client_that_stops_reading_our_output_ends_the_agent() {
    let mock = MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let project = home.path().canonicalize().unwrap();
    let config = write_config(home.path(), &mock.base_url(), "");
    let mut steps = vec![ev_role()];
    for i in 0..300 {
        steps.push(ev_text(&format!("word{i} ")));
        steps.push(Step::Delay(Duration::from_millis(10)));
    }
    mock.push(Reply::Sse(steps));

    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_lathe"));
    command
        .arg("--config")
        .arg(&config)
        .current_dir(&project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("LATHE_") || text.starts_with("OPENAI_") {
            command.env_remove(&name);
        }
    }
    command
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("NO_PROXY", "127.0.0.1,localhost,::1")
        .env("no_proxy", "127.0.0.1,localhost,::1");
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_task = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text).await;
        text
    });

    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": project, "mcpServers": []}}),
    ];
    let mut line = String::new();
    for (message, id) in messages.iter().zip(1..) {
        stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
        loop {
            line.clear();
            assert_ne!(stdout.read_line(&mut line).await.unwrap(), 0, "stdout closed early");
            if serde_json::from_str::<Value>(&line).unwrap()["id"] == id {
                break;
            }
        }
    }
    let response: Value = serde_json::from_str(&line).unwrap();
    let session = response["result"]["sessionId"].as_str().unwrap().to_owned();
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "talk"}]}});
    stdin.write_all(format!("{prompt}\n").as_bytes()).await.unwrap();
    loop {
        line.clear();
        assert_ne!(stdout.read_line(&mut line).await.unwrap(), 0, "stdout closed early");
        if line.contains("agent_message_chunk") {
            break;
        }
    }

    // Close the read end of the agent's stdout; keep its stdin open.
    drop(stdout);
    let closed_at = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(3), child.wait()).await;
    let took = closed_at.elapsed();
    let stderr = tokio::time::timeout(Duration::from_secs(1), stderr_task).await.unwrap().unwrap();
    let status = status.unwrap_or_else(|_| panic!("the agent kept running\n--- agent stderr ---\n{stderr}")).unwrap();
    assert!(took < EXIT_BOUND, "took {took:?}\n{stderr}");
    assert!(status.success(), "exit status {status:?}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    mock.wait_for_disconnects(1, Duration::from_secs(2)).await;
    drop(stdin);
}
