//! The session journal at scale (issue 16), through the real binary: a
//! session saved by an older lathe (journal format 1, checked in) loads and
//! goes on; a streamed answer is stored compactly and replays exactly;
//! `[sessions] keep_days` prunes old sessions at start-up.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{AgentProcess, handshake, prompt, seen};
use crate::support::harness::Harness;
use crate::support::mock_openai::{
    MockOpenAi, Reply, Step, ev_finish, ev_reasoning, ev_role, ev_text, ev_tool_call_args, ev_tool_call_start,
    ev_usage, text_reply, tool_call_reply,
};
use crate::support::write_config;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/journal-v1");

fn sessions_dir(home: &Path) -> std::path::PathBuf {
    home.join(".local/share/lathe/sessions")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

async fn initialize(agent: &mut AgentProcess) {
    let result = crate::support::acp_client::initialize(agent, json!({})).await;
    assert_eq!(result["agentCapabilities"]["loadSession"], true, "{result}");
}

/// The `update`s of the `session/update`s among `messages`.
fn updates(messages: &[Value]) -> Vec<Value> {
    messages.iter().filter(|m| m["method"] == "session/update").map(|m| m["params"]["update"].clone()).collect()
}

/// Issue 16: a newer lathe reads an older journal. The session in
/// `tests/fixtures/journal-v1` was written by lathe 335f05c (format 1: one
/// JSON-RPC line per streamed chunk). Loaded now, it replays what that lathe
/// replayed, and the next model request carries the transcript that lathe
/// sent (see the fixture's README).
#[tokio::test]
async fn a_session_saved_in_journal_format_1_loads_and_goes_on() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(FIXTURE).join("expected.json")).unwrap()).unwrap();
    let session = expected["sessionId"].as_str().unwrap();
    let mut h = Harness::start().await;
    copy_dir(&Path::new(FIXTURE).join(session), &sessions_dir(h.home.path()).join(session));
    initialize(&mut h.agent).await;
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    let (replay, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    assert_eq!(Value::Array(updates(&replay)), expected["replay"], "the replay of a format-1 journal");

    h.mock.push(text_reply("Continuing."));
    let id = prompt(&mut h.agent, session, "Go on").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = h.mock.requests();
    let messages = &requests.last().unwrap().body["messages"];
    assert_eq!(Value::Array(messages.as_array().unwrap()[1..].to_vec()), expected["messages"], "the transcript");

    // The session goes on in format 2, in the same log: both load together.
    let id = h.agent.request("session/close", json!({"sessionId": session})).await;
    h.agent.response(id).await;
    h.restart().await;
    initialize(&mut h.agent).await;
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    let (again, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let mut continued = expected["replay"].as_array().unwrap().clone();
    let usage = continued.pop().unwrap();
    assert_eq!(usage["sessionUpdate"], "usage_update");
    continued.push(json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "Go on"}}));
    let replayed = seen(&again);
    assert_eq!(&replayed[..continued.len()], &continued[..]);
    assert_eq!(replayed[continued.len()]["content"]["text"], "Continuing.");
}

/// Issue 16: a streamed answer is stored as its text (not one JSON-RPC line
/// per chunk, nor a second copy in the transcript), and a load after a
/// restart replays exactly what the user saw: thoughts, plan, tool calls and
/// text, in order; the model then gets the same transcript.
#[tokio::test]
async fn a_streamed_turn_is_stored_compactly_and_replays_exactly() {
    let mut h = Harness::start().await;
    std::fs::write(h.project.join("notes.txt"), "line one\nline two\n").unwrap();
    let session = h.session().await;
    let plan =
        json!({"plan": [{"content": "read", "status": "in_progress"}, {"content": "answer", "status": "pending"}]})
            .to_string();
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_reasoning("First "),
        ev_reasoning("a plan."),
        ev_tool_call_start(0, "call_plan", "update_plan"),
        ev_tool_call_args(0, &plan),
        ev_finish("tool_calls"),
        ev_usage(50, 5),
        Step::Done,
    ]));
    h.mock.push(tool_call_reply(&[("call_read", "read_file", json!({"path": "notes.txt"}))]));
    let mut steps = vec![ev_role(), ev_reasoning("Two lines.")];
    let mut answer = String::new();
    for n in 0..2000 {
        let piece = format!("w{n} \"q\" é\n");
        answer.push_str(&piece);
        steps.push(ev_text(&piece));
    }
    steps.extend([ev_finish("stop"), ev_usage(300, 2000), Step::Done]);
    h.mock.push(Reply::Sse(steps));
    let id = prompt(&mut h.agent, &session, "Plan, read notes.txt, then answer").await;
    let (live, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let id = h.agent.request("session/close", json!({"sessionId": session})).await;
    h.agent.response(id).await;

    let log = std::fs::read_to_string(sessions_dir(h.home.path()).join(&session).join("log.jsonl")).unwrap();
    assert!(log.starts_with("{\"lathe\":\"journal\",\"version\":2}\n"), "{log:.200}");
    assert_eq!(log.matches("w1999 ").count(), 1, "the answer is stored once");
    let escaped = serde_json::to_string(&answer).unwrap().len();
    assert!(log.len() < escaped + 8 * 1024, "{} bytes of log for {escaped} bytes of answer", log.len());

    h.restart().await;
    initialize(&mut h.agent).await;
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    let (replay, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let mut expected = vec![
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "Plan, read notes.txt, then answer"}}),
    ];
    expected.extend(seen(&live));
    let replayed = seen(&replay);
    let kinds: Vec<&str> = replayed.iter().map(|u| u["sessionUpdate"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"plan") && kinds.contains(&"agent_thought_chunk"), "{kinds:?}");
    assert_eq!(replayed, expected, "the replay is what the user saw");
    let last_usage = updates(&replay).into_iter().rev().find(|u| u["sessionUpdate"] == "usage_update");
    assert_eq!(last_usage.unwrap()["used"], 2300, "the last usage figure comes last");

    h.mock.push(text_reply("ok"));
    let id = prompt(&mut h.agent, &session, "thanks").await;
    h.agent.response(id).await;
    let requests = h.mock.requests();
    let messages = requests.last().unwrap().body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]);
    assert_eq!(messages[6]["content"], answer.as_str(), "the answer's text, from the streamed record");
}

/// Issue 16: `[sessions] keep_days` deletes sessions not updated for longer
/// when lathe starts (off the reader: a list waits for it, nothing else).
#[tokio::test]
async fn old_sessions_are_pruned_at_start_up() {
    let mock = MockOpenAi::start().await;
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let project = project.canonicalize().unwrap();
    let sessions = sessions_dir(home.path());
    let at = |days: u64| {
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() - Duration::from_secs(days * 86_400)).to_string()
    };
    for (id, updated) in [("sess_old", at(40)), ("sess_kept", at(3))] {
        std::fs::create_dir_all(sessions.join(id)).unwrap();
        let meta = json!({"sessionId": id, "cwd": project, "createdAt": updated, "updatedAt": updated});
        std::fs::write(sessions.join(id).join("meta.json"), meta.to_string()).unwrap();
    }
    let config = write_config(home.path(), &mock.base_url(), "[sessions]\nkeep_days = 30\n");
    let mut agent = AgentProcess::in_process(&["--config", config.to_str().unwrap()], &[], home.path());
    let created = handshake(&mut agent, json!({}), &project).await;
    let id = agent.request("session/list", json!({"cwd": project})).await;
    let (_, response) = agent.response(id).await;
    let mut listed: Vec<&str> =
        response["result"]["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    listed.sort_unstable();
    let mut expected = vec!["sess_kept", created.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected);
    assert!(!sessions.join("sess_old").exists(), "the old session's folder is gone");
    assert!(sessions.join("sess_kept").exists());
}
