//! MCP servers end to end: the editor passes servers
//! in `session/new` (stdio: the `mcp_fixture` example; Streamable HTTP and
//! HTTP+SSE: the same server in this process), or the config names them; the
//! mock model calls their tools; the fake editor answers permission. The
//! tests check what the model was offered and told, what the editor was
//! shown, and what the servers saw (`MCP_FIXTURE_LOG`). The timeouts are
//! waited out in virtual time ([`FrozenClock`]); what only the servers'
//! processes know (their log, whether they live) is polled.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{
    Agent, DEFAULT_TIMEOUT, agent_text, final_status, prompt, updates_for, updates_of_kind,
};
use crate::support::clock::{FrozenClock, poll_until};
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::mcp_server::{Fixture, HttpMcpServer};
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

/// The stdio fixture, built by `cargo test` next to this test binary
/// (`target/<profile>/examples/mcp_fixture`).
pub(super) fn fixture_path() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let path = profile_dir.join("examples").join(format!("mcp_fixture{}", std::env::consts::EXE_SUFFIX));
    let built = std::fs::metadata(&path).and_then(|m| m.modified());
    let sources = ["examples/mcp_fixture.rs", "tests/support/mcp_server.rs"]
        .map(|source| std::fs::metadata(Path::new(env!("CARGO_MANIFEST_DIR")).join(source)).and_then(|m| m.modified()));
    let fresh = match built {
        Ok(built) => sources.iter().all(|source| source.as_ref().is_ok_and(|source| *source <= built)),
        Err(_) => false,
    };
    assert!(
        fresh,
        "{} is missing or older than its sources: the MCP tests need the example `mcp_fixture`; run them with plain \
         `cargo test` (which builds examples) or `cargo build --example mcp_fixture` first",
        path.display()
    );
    path
}

/// A stdio server description for `session/new`, logging to `log`.
fn stdio_server(name: &str, args: &[&str], log: &Path) -> Value {
    json!({
        "name": name,
        "command": fixture_path(),
        "args": args,
        "env": [{"name": "MCP_FIXTURE_LOG", "value": log}],
    })
}

/// Bound on waits for what the servers' processes do (real time).
const WAIT: Duration = Duration::from_secs(5);

/// `initialize` then `session/new` with these MCP servers; returns the
/// session id.
async fn session_with(agent: &mut Agent, cwd: &Path, servers: Value) -> String {
    let id = agent.request("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
    let (_, response) = agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let id = agent.request("session/new", json!({"cwd": cwd, "mcpServers": servers})).await;
    let (_, response) = agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned();
    // The slash commands follow the response.
    let commands = agent.next_message(DEFAULT_TIMEOUT).await.expect("available_commands_update");
    assert_eq!(commands["params"]["update"]["sessionUpdate"], "available_commands_update");
    session
}

/// Switches the session's mode (tests not about permission use `full-auto`).
async fn set_mode(h: &mut Harness, session: &str, mode: &str) {
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

async fn run(h: &mut Harness, session: &str, editor: &mut FakeEditor) -> (Vec<Value>, Value) {
    let id = prompt(&mut h.agent, session, "do it").await;
    h.agent.response_answering(id, |request| editor.answer(request)).await
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

fn tool<'a>(body: &'a Value, name: &str) -> &'a Value {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not offered: {:?}", tool_names(body)))
}

/// The last content a call showed, as JSON.
fn final_content(messages: &[Value], call_id: &str) -> Value {
    updates_for(messages, call_id).iter().rev().find_map(|u| u.get("content").cloned()).unwrap_or(Value::Null)
}

fn read_log(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Waits until the fixture's log has `count` lines `line`.
async fn wait_for_log(log: &Path, line: &str, count: usize) {
    let what = format!("the fixture logs {line:?} {count} time(s)");
    poll_until(&what, WAIT, || read_log(log).iter().filter(|l| *l == line).count() >= count).await;
}

/// The process ids the fixture logged at start.
fn started_pids(log: &Path) -> Vec<i32> {
    read_log(log).iter().filter_map(|l| l.strip_prefix("start:")).filter_map(|pid| pid.parse().ok()).collect()
}

/// Whether `pid` lives (a zombie, exited but not yet reaped, does not):
/// `/proc` on Linux, the system's process list on Windows.
fn alive(pid: i32) -> bool {
    u32::try_from(pid).is_ok_and(crate::support::commands::alive)
}

async fn wait_dead(pid: i32) {
    poll_until(&format!("MCP server process {pid} dies"), WAIT, || !alive(pid)).await;
}

/// Items 21 and 9: lathe says it speaks HTTP and SSE MCP servers (stdio is a given).
#[tokio::test]
async fn initialize_advertises_http_and_sse_mcp_servers() {
    let mut h = Harness::start().await;
    let id = h.agent.request("initialize", json!({"protocolVersion": 1})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["agentCapabilities"]["mcpCapabilities"], json!({"http": true, "sse": true}));
}

/// A stdio server's tools are offered namespaced, with cleaned schemas; both
/// calls ask like a command (the one the server marks read-only too: see
/// the next test); both results go back to the model.
#[tokio::test]
async fn stdio_tools_are_offered_and_called_behind_permission() {
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fixture", &[], &log)])).await;
    h.mock.push(tool_call_reply(&[
        ("call_e", "fixture__echo", json!({"text": "hello"})),
        ("call_n", "fixture__note", json!({"text": "remember"})),
    ]));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once"), Permission::Select("allow_once")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let first = &h.mock.requests()[0].body;
    let names = tool_names(first);
    assert_eq!(names[0], "read_file", "built-ins first");
    let mcp: Vec<&String> = names.iter().filter(|n| n.contains("__")).collect();
    let mut sorted = mcp.clone();
    sorted.sort();
    assert_eq!(mcp, sorted, "MCP tools sorted by name");
    for expected in ["fixture__echo", "fixture__note", "fixture__dotted_name", "fixture__hang"] {
        assert!(names.iter().any(|n| n == expected), "{expected} in {names:?}");
    }
    let note = &tool(first, "fixture__note")["function"];
    assert_eq!(note["description"], "Writes a note somewhere.");
    assert!(note["parameters"].get("$schema").is_none(), "{note}");
    assert!(note["parameters"]["properties"]["link"].get("format").is_none(), "{note}");
    assert_eq!(note["parameters"]["type"], "object");

    // Both asked like a command.
    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 2, "{:?}", editor.methods());
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_e");
    let question = &asked[1]["params"]["toolCall"];
    assert_eq!(question["toolCallId"], "call_n");
    assert_eq!(question["title"], "note (fixture): text=\"remember\"");
    let options: Vec<&str> =
        asked[1]["params"]["options"].as_array().unwrap().iter().map(|o| o["optionId"].as_str().unwrap()).collect();
    // For this session, this project, every project (issue 32).
    assert_eq!(
        options,
        ["allow_once", "allow_always", "allow_always_project", "allow_always_user", "reject_once", "reject_always"]
    );

    let started = updates_of_kind(&before, "tool_call");
    let echo_start = started.iter().find(|u| u["toolCallId"] == "call_e").unwrap();
    assert_eq!(echo_start["title"], "Echo (fixture)");
    assert_eq!(echo_start["kind"], "read");
    let described = updates_for(&before, "call_n").into_iter().find(|u| u["kind"].is_string()).unwrap();
    assert_eq!(described["kind"], "edit");
    assert_eq!(final_status(&before, "call_e"), "completed");
    assert_eq!(final_status(&before, "call_n"), "completed");
    assert_eq!(final_content(&before, "call_e")[0]["content"]["text"], "echo: hello");

    let second = &h.mock.requests()[1].body;
    assert_eq!(tool_result(second, "call_e"), "echo: hello");
    assert_eq!(tool_result(second, "call_n"), "noted: remember");
    assert_eq!(second["tools"], first["tools"], "the tool list is byte-stable between requests");
    assert_eq!(read_log(&log).iter().filter(|l| l.starts_with("call:")).count(), 2);
}

/// Issue 11, defect 10: a server's `readOnlyHint` never lowers the bar. A
/// tool it marks read-only asks in ask and accept-edits modes; in read-only
/// mode it still asks (every time) while the others are refused; only
/// full-auto runs it unasked.
#[tokio::test]
async fn a_read_only_hint_never_skips_the_question() {
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fx", &[], &log)])).await;
    for mode in ["ask", "accept-edits"] {
        set_mode(&mut h, &session, mode).await;
        h.mock.push(tool_call_reply(&[("call_e", "fx__echo", json!({"text": mode}))]));
        h.mock.push(text_reply("ok"));
        let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
        run(&mut h, &session, &mut editor).await;
        assert_eq!(editor.requests_for("session/request_permission").len(), 1, "{mode} asks");
    }
    set_mode(&mut h, &session, "read-only").await;
    h.mock.push(tool_call_reply(&[
        ("call_r", "fx__echo", json!({"text": "looked up"})),
        ("call_w", "fx__note", json!({"text": "written"})),
    ]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 1, "{:?}", editor.methods());
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_r");
    let offered: Vec<&str> =
        asked[0]["params"]["options"].as_array().unwrap().iter().map(|o| o["optionId"].as_str().unwrap()).collect();
    assert!(!offered.contains(&"allow_always"), "read-only mode asks every time: {offered:?}");
    assert_eq!(final_status(&before, "call_r"), "completed");
    assert_eq!(final_status(&before, "call_w"), "failed");
    let told = tool_result(&h.mock.requests().last().unwrap().body, "call_w");
    assert!(told.contains("read-only mode"), "{told}");
    assert!(!read_log(&log).iter().any(|l| l == "call:note"), "the refused call never reached the server");

    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_f", "fx__echo", json!({"text": "auto"}))]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::default();
    let (before, _) = run(&mut h, &session, &mut editor).await;
    assert!(editor.requests.is_empty(), "{:?}", editor.methods());
    assert_eq!(final_status(&before, "call_f"), "completed");
}

/// Rejecting an MCP tool tells the model; "always" remembers the tool.
#[tokio::test]
async fn permission_answers_for_mcp_tools_are_remembered_per_tool() {
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fixture", &[], &log)])).await;
    h.mock.push(tool_call_reply(&[("call_1", "fixture__note", json!({"text": "a"}))]));
    h.mock.push(tool_call_reply(&[("call_2", "fixture__note", json!({"text": "b"}))]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_always")]);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    assert_eq!(editor.requests_for("session/request_permission").len(), 1, "the second call did not ask");
    assert_eq!(final_status(&before, "call_2"), "completed");

    h.mock.push(tool_call_reply(&[("call_3", "fixture__crash", json!({}))]));
    h.mock.push(text_reply("ok"));
    let mut editor = FakeEditor::answering(&[Permission::Select("reject_once")]);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    assert_eq!(final_status(&before, "call_3"), "failed");
    let last = h.mock.requests().last().unwrap().body.clone();
    assert!(tool_result(&last, "call_3").contains("declined"), "{last}");
    assert!(!read_log(&log).iter().any(|l| l == "call:crash"), "a rejected call never reaches the server");
}

/// A sub-agent whose file lists an MCP tool (`server__tool`) gets it and
/// calls it through the session's own connection, asked about as the
/// session's calls are (the question naming the agent); a tool of that
/// server it does not list is no tool of its.
#[tokio::test]
async fn a_sub_agent_calls_the_mcp_tools_it_lists_through_the_sessions_server() {
    let mut h = Harness::start().await;
    let agents = h.project.join(".lathe/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("echoer.md"),
        "---\nname: echoer\ndescription: Echoes\ntools: read_file, fixture__echo\n---\nYou echo.\n",
    )
    .unwrap();
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fixture", &[], &log)])).await;
    h.mock.push(tool_call_reply(&[(
        "call_t",
        "task",
        json!({"description": "echo", "prompt": "Echo hi.", "agent": "echoer"}),
    )]));
    h.mock.push(tool_call_reply(&[
        ("call_e", "fixture__echo", json!({"text": "hi"})),
        ("call_n", "fixture__note", json!({"text": "sneaky"})),
    ]));
    h.mock.push(text_reply("It said: echo: hi"));
    h.mock.push(text_reply("done"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (messages, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let requests = h.mock.chat_requests();
    assert!(tool_names(&requests[0].body).iter().any(|n| n == "fixture__note"), "the parent has every tool");
    assert_eq!(tool_names(&requests[1].body), ["read_file", "fixture__echo"], "the child has what it lists");
    assert_eq!(tool(&requests[1].body, "fixture__echo"), tool(&requests[0].body, "fixture__echo"));
    let asked = editor.requests_for("session/request_permission");
    assert_eq!(asked.len(), 1, "{:?}", editor.methods());
    let question = &asked[0]["params"]["toolCall"];
    assert_eq!(question["toolCallId"], "call_t.call_e");
    assert_eq!(question["title"], "echoer agent: Echo (fixture): text=\"hi\"");
    assert_eq!(tool_result(&requests[2].body, "call_e"), "echo: hi");
    let refused = tool_result(&requests[2].body, "call_n");
    assert!(refused.starts_with("There is no tool named \"fixture__note\""), "{refused}");
    assert_eq!(final_status(&messages, "call_t.call_e"), "completed");
    assert_eq!(final_status(&messages, "call_t.call_n"), "failed");
    assert_eq!(tool_result(&requests[3].body, "call_t"), "It said: echo: hi");
    assert_eq!(read_log(&log).iter().filter(|l| l.starts_with("call:")).collect::<Vec<_>>(), ["call:echo"]);
}

/// `isError` results are failures the model reads; structured content and
/// images come through.
#[tokio::test]
async fn errors_images_and_structured_content_come_back() {
    let mut h = Harness::with_config("[mcp]\ncall_timeout_secs = 5\n").await;
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fx", &[], &log)])).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[
        ("call_f", "fx__fail", json!({})),
        ("call_r", "fx__rich", json!({})),
        ("call_s", "fx__structured", json!({})),
    ]));
    h.mock.push(text_reply("seen"));
    let mut editor = FakeEditor::default();
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    assert_eq!(final_status(&before, "call_f"), "failed");
    let body = &h.mock.requests()[1].body;
    assert_eq!(tool_result(body, "call_f"), "The tool reported an error:\nthe fixture failed on purpose");

    let rich = final_content(&before, "call_r");
    let kinds: Vec<&str> = rich.as_array().unwrap().iter().map(|c| c["content"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "text", "resource_link"], "{rich}");
    assert_eq!(rich[1]["content"]["mimeType"], "image/png");
    assert_eq!(rich[3]["content"]["uri"], "file:///report.pdf");
    let told = tool_result(body, "call_r");
    assert!(told.starts_with("a picture:\n[image: image/png"), "{told}");
    assert!(told.contains("[resource file:///notes.txt]\nfile body"), "{told}");

    let structured: Value = serde_json::from_str(&tool_result(body, "call_s")).unwrap();
    assert_eq!(structured, json!({"temperature": 21, "unit": "C"}));
}

/// A stdio server that dies mid-call: the call fails saying so, the session
/// lives, the server starts again on the next call; a second death withdraws
/// its tools.
#[tokio::test]
async fn a_crashed_server_is_restarted_once() {
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fx", &[], &log)])).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_c", "fx__crash", json!({}))]));
    h.mock.push(text_reply("it crashed"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_always")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(final_status(&before, "call_c"), "failed");
    let told = tool_result(&h.mock.requests()[1].body, "call_c");
    assert!(told.contains("The MCP server `fx` stopped while running `crash`"), "{told}");
    assert!(told.contains("exited with status 3"), "{told}");
    assert!(told.contains("crashing on purpose"), "its stderr explains: {told}");
    assert!(told.contains("start it again on the next call"), "{told}");
    assert_eq!(h.mock.requests()[1].body["tools"], h.mock.requests()[0].body["tools"], "its tools stay offered");

    h.mock.push(tool_call_reply(&[("call_e", "fx__echo", json!({"text": "again"}))]));
    h.mock.push(text_reply("back"));
    let (before, _) = run(&mut h, &session, &mut editor).await;
    assert_eq!(final_status(&before, "call_e"), "completed");
    assert_eq!(tool_result(&h.mock.requests()[3].body, "call_e"), "echo: again");
    assert_eq!(started_pids(&log).len(), 2, "started again once: {:?}", read_log(&log));

    // A second death: no second restart, the tools are withdrawn.
    h.mock.push(tool_call_reply(&[("call_c2", "fx__crash", json!({}))]));
    h.mock.push(text_reply("gone"));
    let (_, _) = run(&mut h, &session, &mut editor).await;
    let told = tool_result(&h.mock.requests()[5].body, "call_c2");
    assert!(told.contains("tools are withdrawn"), "{told}");
    assert!(!tool_names(&h.mock.requests()[5].body).iter().any(|n| n.starts_with("fx__")));
    assert_eq!(started_pids(&log).len(), 2);
}

/// A server that never answers: the call times out after `[mcp]
/// call_timeout_secs` (300 s by default, waited out in virtual time) and the
/// server is told to cancel; a user's cancel ends the same wait at once
/// (under the frozen clock: without waiting out anything), with
/// `notifications/cancelled`.
#[tokio::test(start_paused = true)]
async fn a_silent_server_times_out_and_cancel_wins() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fx", &[], &log)])).await;
    h.mock.push(tool_call_reply(&[("call_h", "fx__hang", json!({}))]));
    h.mock.push(text_reply("too slow"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_always")]);
    let id = prompt(&mut h.agent, &session, "do it").await;
    // The call's timer is set before the request goes to the server.
    let (mut before, asked) =
        h.agent.until("the permission request", |m| m["method"] == "session/request_permission").await;
    let crate::support::acp_client::Answer::Result(allowed) = editor.answer(&asked) else { unreachable!() };
    h.agent.reply(&asked["id"], allowed).await;
    wait_for_log(&log, "call:hang", 1).await;
    clock.advance(Duration::from_millis(299_999)).await;
    let meanwhile = h.agent.barrier().await;
    let finished = updates_for(&meanwhile, "call_h").into_iter().any(|u| u["status"] == "failed");
    assert!(!finished, "still waited for after 299.999 s: {meanwhile:?}");
    before.extend(meanwhile);
    clock.advance(Duration::from_millis(1)).await;
    let (after, _) = h.agent.response(id).await;
    before.extend(after);
    assert_eq!(final_status(&before, "call_h"), "failed");
    let told = tool_result(&h.mock.requests()[1].body, "call_h");
    assert!(told.contains("did not answer this `hang` call within 300 s"), "{told}");
    wait_for_log(&log, "cancelled:hang", 1).await;

    // Now cancel while it hangs.
    h.mock.push(tool_call_reply(&[("call_h2", "fx__hang", json!({}))]));
    let id = prompt(&mut h.agent, &session, "again").await;
    h.agent
        .until("the call starts", |m| {
            m["params"]["update"]["toolCallId"] == "call_h2" && m["params"]["update"]["status"] == "in_progress"
        })
        .await;
    // Cancel once the server runs it (a cancel before that never bothers the server).
    wait_for_log(&log, "call:hang", 2).await;
    let waited = clock.elapsed();
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(clock.elapsed(), waited, "answered without waiting out a timer");
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    assert_eq!(final_status(&before, "call_h2"), "failed");
    wait_for_log(&log, "cancelled:hang", 2).await;
}

/// `notifications/tools/list_changed`: the next request offers the new list.
#[tokio::test]
async fn list_changed_reaches_the_next_request() {
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let session = session_with(&mut h.agent, &h.project, json!([stdio_server("fx", &[], &log)])).await;
    h.mock.push(tool_call_reply(&[("call_g", "fx__grow", json!({}))]));
    h.mock.push(tool_call_reply(&[("call_x", "fx__extra", json!({}))]));
    h.mock.push(text_reply("grown"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_always"), Permission::Select("allow_once")]);
    let (before, _) = run(&mut h, &session, &mut editor).await;
    let requests = h.mock.requests();
    assert!(!tool_names(&requests[0].body).contains(&"fx__extra".to_owned()));
    assert!(tool_names(&requests[1].body).contains(&"fx__extra".to_owned()), "{:?}", tool_names(&requests[1].body));
    assert_eq!(final_status(&before, "call_x"), "completed");
    assert_eq!(tool_result(&requests[2].body, "call_x"), "extra!");
}

/// The same tools over Streamable HTTP and the older HTTP+SSE transport.
#[tokio::test]
async fn http_and_sse_servers_work_too() {
    let server = HttpMcpServer::start(Fixture::new(None)).await;
    let mut h = Harness::start().await;
    let servers = json!([
        {"type": "http", "name": "web", "url": server.url(), "headers": [{"name": "X-Test", "value": "1"}]},
        {"type": "sse", "name": "old", "url": server.sse_url(), "headers": []},
    ]);
    let session = session_with(&mut h.agent, &h.project, servers).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[
        ("call_w", "web__echo", json!({"text": "over http"})),
        ("call_o", "old__echo", json!({"text": "over sse"})),
        ("call_g", "web__grow", json!({})),
    ]));
    h.mock.push(text_reply("both"));
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (before, response) = run(&mut h, &session, &mut editor).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}\n{}", h.agent.stderr());
    let requests = h.mock.requests();
    let names = tool_names(&requests[0].body);
    assert!(names.contains(&"web__echo".to_owned()) && names.contains(&"old__echo".to_owned()), "{names:?}");
    assert_eq!(final_status(&before, "call_w"), "completed");
    assert_eq!(tool_result(&requests[1].body, "call_w"), "echo: over http");
    assert_eq!(tool_result(&requests[1].body, "call_o"), "echo: over sse");
    assert!(tool_names(&requests[1].body).contains(&"web__extra".to_owned()), "list_changed over HTTP");
}

/// A server that cannot start, one that starts too slowly: the user is told
/// which and why at the first prompt; the session and the other server work.
///
/// In real time (the 1 s startup timeout is waited out): lathe finds out how
/// a server that failed ended by looking again every 5 ms for up to 300 ms
/// (`ChildProcess::describe_exit`), which a frozen clock would have to be
/// stepped through. That session/new waits for no server is checked under
/// a frozen clock by the next test.
#[tokio::test]
async fn servers_that_fail_to_start_are_reported_and_the_others_work() {
    let mut h = Harness::with_config("[mcp]\nstartup_timeout_secs = 1\n").await;
    let log = h.home.path().join("fixture.log");
    let servers = json!([
        stdio_server("broken", &["--fail-start"], &log),
        stdio_server("slow", &["--slow-start", "30"], &log),
        stdio_server("good", &[], &log),
        {"name": "missing", "command": "/nonexistent/mcp-server", "args": [], "env": []},
    ]);
    let session = session_with(&mut h.agent, &h.project, servers).await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_e", "good__echo", json!({"text": "still here"}))]));
    h.mock.push(text_reply("fine"));
    let (before, response) = run(&mut h, &session, &mut FakeEditor::default()).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let said = agent_text(&before);
    assert!(said.contains("MCP server `broken` is unavailable"), "{said}");
    assert!(said.contains("exited with status 2") && said.contains("bad configuration"), "{said}");
    assert!(said.contains("MCP server `slow` is unavailable") && said.contains("within 1 s"), "{said}");
    assert!(said.contains("MCP server `missing` is unavailable") && said.contains("cannot start"), "{said}");
    assert!(said.ends_with("fine"), "the answer follows: {said}");
    let names = tool_names(&h.mock.requests()[0].body);
    assert!(names.contains(&"good__echo".to_owned()));
    assert!(!names.iter().any(|n| n.starts_with("broken__") || n.starts_with("slow__")), "{names:?}");
    assert_eq!(tool_result(&h.mock.requests()[1].body, "call_e"), "echo: still here");

    // Told once, not at every prompt.
    h.mock.push(text_reply("again"));
    let (before, _) = run(&mut h, &session, &mut FakeEditor::default()).await;
    assert_eq!(agent_text(&before), "again");
}

/// `session/new` answers at once whatever its servers do: under a frozen
/// clock (so without waiting out the startup timeout) while a server takes
/// 30 s of real time to start (more than the response wait's bound).
#[tokio::test(start_paused = true)]
async fn session_new_waits_for_no_server() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let servers = json!([stdio_server("slow", &["--slow-start", "30"], &log), stdio_server("good", &[], &log)]);
    session_with(&mut h.agent, &h.project, servers).await;
    assert_eq!(clock.elapsed(), Duration::ZERO);
}

/// Servers from `[mcp_servers.<name>]` in the config, for every session.
#[tokio::test]
async fn servers_from_the_config_file() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("fixture.log");
    let config =
        format!("[mcp_servers.cfg]\ncommand = {:?}\nenv = {{ MCP_FIXTURE_LOG = {:?} }}\n", fixture_path(), log);
    let mut h = Harness::with_config(&config).await;
    let session = h.session().await;
    set_mode(&mut h, &session, "full-auto").await;
    h.mock.push(tool_call_reply(&[("call_e", "cfg__echo", json!({"text": "from the config"}))]));
    h.mock.push(text_reply("ok"));
    let (before, _) = run(&mut h, &session, &mut FakeEditor::default()).await;
    assert_eq!(final_status(&before, "call_e"), "completed");
    assert_eq!(tool_result(&h.mock.requests()[1].body, "call_e"), "echo: from the config");
}

/// Closing the session kills its servers; so does lathe's exit on EOF.
#[tokio::test]
async fn servers_die_with_their_session_and_with_lathe() {
    let mut h = Harness::start().await;
    let log = h.home.path().join("fixture.log");
    let first = session_with(&mut h.agent, &h.project, json!([stdio_server("fx", &[], &log)])).await;
    poll_until("the server starts", WAIT, || !started_pids(&log).is_empty()).await;
    let pid = started_pids(&log)[0];
    assert!(alive(pid));
    let id = h.agent.request("session/close", json!({"sessionId": first})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    wait_dead(pid).await;

    let id =
        h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": [stdio_server("fx", &[], &log)]})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    poll_until("the second server starts", WAIT, || started_pids(&log).len() >= 2).await;
    let pid = started_pids(&log)[1];
    h.agent.close_stdin();
    let exit = h.agent.wait_exit(WAIT).await.expect("lathe ends on EOF");
    assert!(exit.success(), "{exit:?}");
    wait_dead(pid).await;
}
