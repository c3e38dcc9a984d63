//! Process hygiene and a misbehaving client. On EOF (in this process, under
//! a frozen clock) and on SIGTERM, SIGINT or SIGHUP (the binary) the agent
//! cancels its turns, kills every process group its shell commands started,
//! releases editor terminals, answers the pending prompt, and ends cleanly;
//! shell children never write to the binary's stdout and read EOF from
//! stdin; a client that stops reading the binary's stdout or never answers a
//! permission request cannot wedge the agent.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

use crate::support::acp_client::{Answer, prompt};
use crate::support::clock::{FrozenClock, eventually, poll_until};
use crate::support::editor::FakeEditor;
use crate::support::harness::Harness;
use crate::support::live_processes;
use crate::support::mock_openai::{Reply, Step, ev_role, ev_text, text_reply, tool_call_reply};

/// Bound on waits for processes and for the agent's end (a hang detector).
const WAIT: Duration = Duration::from_secs(5);

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

/// Waits a little for every process matching `pattern` to die (SIGKILL
/// takes effect in the kernel's time, not ours); kills the survivors (by
/// pid) and fails if any remain.
async fn assert_none_survive(pattern: &str) {
    if eventually(Duration::from_secs(2), || live_processes(pattern).is_empty()).await {
        return;
    }
    let alive = live_processes(pattern);
    for pid in &alive {
        let _ = kill(Pid::from_raw(i32::try_from(*pid).unwrap()), Signal::SIGKILL);
    }
    panic!("processes outlived the agent: {alive:?} ({pattern})");
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
/// the prompt was answered `cancelled`, the agent ended cleanly, and neither
/// sleep survived. Returns the harness (its agent ended).
async fn shutdown_kills_shell_children(mut h: Harness, stop: Stop) -> Harness {
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    let sleep = format!("sleep {}", unique_sleep());
    let command = format!("{sleep} & {sleep}; echo never");
    h.mock.push(tool_call_reply(&[("call_s", "shell", json!({"command": command}))]));
    let id = prompt(&mut h.agent, &session, "wait a minute").await;
    let mut editor = FakeEditor::default();
    wait_for_message(&mut h, &mut editor, |m| m["params"]["update"]["status"] == "in_progress").await;
    let pattern = format!("{sleep} ");
    poll_until("both sleeps start", WAIT, || live_processes(&pattern).len() == 2).await;

    stop.apply(&mut h);
    // Flushed before the end: the pending prompt was answered.
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{stop:?}: {response}");
    let exit = h.agent.wait_exit(WAIT).await.expect("the agent ends");
    // SIGKILL was sent to the group before the agent ended; give the kernel
    // a moment to finish the deliveries. (Checked first: it also cleans up.)
    assert_none_survive(&pattern).await;
    assert!(exit.success(), "{stop:?}: {exit:?}\n{}", h.agent.stderr());
    h.agent.assert_stdout_is_only_jsonrpc();
    assert!(!h.agent.stderr().contains("panicked"), "{}", h.agent.stderr());
    h
}

/// EOF, in this process under a frozen clock: the children are killed and
/// serve ends without waiting out any timer (no grace period, no timeout:
/// none can fire), which is the "within a second" of the issue, made exact.
#[tokio::test(start_paused = true)]
async fn eof_kills_shell_children_and_ends() {
    let clock = FrozenClock::hold().await;
    shutdown_kills_shell_children(Harness::start().await, Stop::Eof).await;
    assert_eq!(clock.elapsed(), Duration::ZERO);
}

/// SIGTERM, SIGINT and SIGHUP reach the binary's shutdown: each kills the
/// shell's process group, answers the prompt and exits 0.
#[tokio::test]
async fn signals_kill_shell_children_and_exit() {
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let h = shutdown_kills_shell_children(Harness::process("", &[]).await, Stop::Signal(signal)).await;
        assert!(h.agent.is_process());
    }
}

/// A command running in an editor terminal: shutting down releases the
/// terminal (`terminal/release` also kills its command) before the prompt's
/// answer and the end.
async fn shutdown_releases_client_terminals(mut h: Harness, stop: Stop) {
    let session = h.session_with(json!({"terminal": true})).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_t", "shell", json!({"command": "sleep 60"}))]));
    let id = prompt(&mut h.agent, &session, "wait").await;
    let mut editor = FakeEditor::default();
    let waiting = wait_for_message(&mut h, &mut editor, |m| m["method"] == "terminal/wait_for_exit").await;
    let terminal = waiting["params"]["terminalId"].clone();

    stop.apply(&mut h);
    // No answers: after EOF the agent could not read them anyway.
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{stop:?}: {response}");
    let released: Vec<&Value> = before.iter().filter(|m| m["method"] == "terminal/release").collect();
    assert_eq!(released.len(), 1, "{stop:?}: one terminal/release before the answer: {before:?}");
    assert_eq!(released[0]["params"], json!({"sessionId": session, "terminalId": terminal}));
    let exit = h.agent.wait_exit(WAIT).await.expect("the agent ends");
    assert!(exit.success(), "{stop:?}: {exit:?}\n{}", h.agent.stderr());
}

/// In this process, under a frozen clock: no timer is waited out.
#[tokio::test(start_paused = true)]
async fn eof_releases_client_terminals() {
    let clock = FrozenClock::hold().await;
    shutdown_releases_client_terminals(Harness::start().await, Stop::Eof).await;
    assert_eq!(clock.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn sigterm_releases_client_terminals() {
    shutdown_releases_client_terminals(Harness::process("", &[]).await, Stop::Signal(Signal::SIGTERM)).await;
}

/// Children write to their own pipes, never to the binary's stdout (even
/// through `/dev/stdout` or `/proc/self/fd/1`); their stdin is `/dev/null`:
/// a `cat` that read the agent's stdin would wait for ever (the test never
/// closes it), and the turn would not end.
#[tokio::test]
async fn children_neither_inherit_stdout_nor_read_stdin() {
    let mut h = Harness::process("", &[]).await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    let command = "echo plain-echo; echo via-dev-stdout > /dev/stdout; echo via-proc-fd1 > /proc/self/fd/1; \
                   echo via-stderr >&2; echo \"fd0=$(readlink /proc/$$/fd/0)\"; \
                   echo \"fd1=$(readlink /proc/$$/fd/1)\"; cat; echo \"cat:$?\"; \
                   echo \"env:$TERM:$NO_COLOR:$PAGER:$GIT_TERMINAL_PROMPT\"";
    h.mock.push(tool_call_reply(&[("call_io", "shell", json!({"command": command}))]));
    h.mock.push(text_reply("seen"));
    let id = prompt(&mut h.agent, &session, "run it").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

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

/// A client that never answers a permission request, then closes our input:
/// the question is withdrawn, the prompt answered `cancelled`, and serve
/// ends. Under a frozen clock: an hour of waiting does not make the turn
/// decide by itself, and the shutdown waits out no timer.
#[tokio::test(start_paused = true)]
async fn eof_ends_a_turn_waiting_for_permission() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[("call_p", "write_file", json!({"path": "f.txt", "content": "x"}))]));
    let id = prompt(&mut h.agent, &session, "write it").await;
    let mut editor = FakeEditor::default(); // ignores permission requests
    let asked = wait_for_message(&mut h, &mut editor, |m| m["method"] == "session/request_permission").await;
    // The turn waits for the answer rather than deciding by itself.
    clock.advance(Duration::from_secs(3600)).await;
    let meanwhile = h.agent.barrier().await;
    assert!(meanwhile.is_empty(), "the turn waits: {meanwhile:?}");

    let waited = clock.elapsed();
    h.agent.close_stdin();
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let withdrawn = before.iter().find(|m| m["method"] == "$/cancel_request").expect("$/cancel_request sent");
    assert_eq!(withdrawn["params"]["requestId"], asked["id"]);
    let exit = h.agent.wait_exit(WAIT).await.expect("the agent ends");
    assert!(exit.success(), "{exit:?}\n{}", h.agent.stderr());
    assert_eq!(clock.elapsed(), waited, "no timer was waited out");
    assert!(!h.project.join("f.txt").exists());
}

/// A client that closes its end of the binary's stdout while it streams:
/// the next write fails (EPIPE, on the writer thread of `serve_stdio`), and
/// the agent shuts down and exits 0 instead of spinning or panicking, even
/// though its stdin stays open. The model stream is closed.
#[tokio::test]
async fn a_client_that_stops_reading_our_output_ends_the_agent() {
    let mut h = Harness::process("", &[]).await;
    let mut steps = vec![ev_role()];
    for i in 0..300 {
        steps.push(ev_text(&format!("word{i} ")));
        steps.push(Step::Delay(Duration::from_millis(10)));
    }
    h.mock.push(Reply::Sse(steps));
    let session = h.session().await;
    prompt(&mut h.agent, &session, "talk").await;
    h.agent.until("the first chunk", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;

    // Close the read end of the agent's stdout; keep its stdin open.
    h.agent.stop_reading_output();
    let exit = h.agent.wait_exit(WAIT).await;
    let stderr = h.agent.stderr();
    let exit = exit.unwrap_or_else(|| panic!("the agent kept running\n--- agent stderr ---\n{stderr}"));
    assert!(exit.success(), "{exit:?}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // A stream that ran to its end would not count: this one had seconds to go.
    h.mock.wait_for_disconnects(1, WAIT).await;
}
