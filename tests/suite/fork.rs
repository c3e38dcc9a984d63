//! Forking (issue 30 item 5): `session/fork` (unstable, advertised as
//! `sessionCapabilities.fork`) makes a new session with a copy of the
//! conversation, all of it or up to a message (`_meta.lathe.messageId`),
//! with its own journal; the source is left as it was, and both go on
//! separately. `lathe sessions fork ID` does the same from a terminal.

use std::path::PathBuf;
use std::time::Duration;

use lathe::cli::sessions::{SessionsCommand, run};
use serde_json::{Value, json};

use crate::support::acp_client::{initialize, prompt, updates_of_kind};
use crate::support::harness::Harness;
use crate::support::mock_openai::{RecordedRequest, text_reply};

/// The text of a request's messages after the system prompt, as `role: text`.
fn history(request: &RecordedRequest) -> Vec<String> {
    request.body["messages"].as_array().unwrap()[1..]
        .iter()
        .map(|m| format!("{}: {}", m["role"].as_str().unwrap(), m["content"].as_str().unwrap_or_default()))
        .collect()
}

/// One prompt and its answer; returns the answer's message id.
async fn exchange(h: &mut Harness, session: &str, said: &str, answer: &str) -> String {
    h.mock.push(text_reply(answer));
    let id = prompt(&mut h.agent, session, said).await;
    let (seen, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let chunk = updates_of_kind(&seen, "agent_message_chunk");
    chunk[0]["messageId"].as_str().unwrap().to_owned()
}

async fn fork(h: &mut Harness, session: &str, meta: Option<Value>) -> Value {
    let mut params = json!({"sessionId": session, "cwd": h.project, "mcpServers": []});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let id = h.agent.request("session/fork", params).await;
    let (_, response) = h.agent.response(id).await;
    // Its slash commands follow the answer.
    if response.get("result").is_some() {
        h.agent
            .until("the fork's commands", |m| m["params"]["update"]["sessionUpdate"] == "available_commands_update")
            .await;
    }
    response
}

/// The history the model gets in the last request.
fn last_history(h: &Harness) -> Vec<String> {
    let requests = h.mock.chat_requests();
    history(&requests[requests.len() - 1])
}

#[tokio::test]
async fn a_fork_copies_the_conversation_and_both_go_on_separately() {
    let mut h = Harness::start().await;
    let result = initialize(&mut h.agent, json!({})).await;
    assert_eq!(result["agentCapabilities"]["sessionCapabilities"]["fork"], json!({}), "{result}");
    let session = h.session().await;
    let first = exchange(&mut h, &session, "first", "one").await;
    exchange(&mut h, &session, "second", "two").await;

    let response = fork(&mut h, &session, None).await;
    let forked = response["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned();
    assert_ne!(forked, session);
    assert_eq!(response["result"]["modes"]["currentModeId"], "ask");
    assert!(response["result"]["configOptions"].is_array());

    exchange(&mut h, &forked, "fork branch", "in the fork").await;
    assert_eq!(
        last_history(&h),
        ["user: first", "assistant: one", "user: second", "assistant: two", "user: fork branch"]
    );
    exchange(&mut h, &session, "source branch", "in the source").await;
    assert_eq!(
        last_history(&h),
        ["user: first", "assistant: one", "user: second", "assistant: two", "user: source branch"],
        "the source never sees the fork's turns"
    );

    // Cut at the first answer.
    let response = fork(&mut h, &session, Some(json!({"lathe": {"messageId": first}}))).await;
    let cut = response["result"]["sessionId"].as_str().unwrap().to_owned();
    exchange(&mut h, &cut, "cut branch", "from the start").await;
    assert_eq!(last_history(&h), ["user: first", "assistant: one", "user: cut branch"]);
    let response = fork(&mut h, &session, Some(json!({"lathe": {"messageId": "msg_nope"}}))).await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    let response = fork(&mut h, "sess_nope", None).await;
    assert_eq!(response["error"]["code"], -32002, "{response}");

    // Each has its own journal: loaded in a new process, each replays its own.
    h.restart().await;
    initialize(&mut h.agent, json!({})).await;
    for (id, own, other) in [(&session, "source branch", "fork branch"), (&forked, "fork branch", "source branch")] {
        let load = h.agent.request("session/load", json!({"sessionId": id, "cwd": h.project, "mcpServers": []})).await;
        let (replay, response) = h.agent.response(load).await;
        assert!(response.get("result").is_some(), "{response}");
        let said: Vec<&Value> =
            updates_of_kind(&replay, "user_message_chunk").into_iter().map(|u| &u["content"]["text"]).collect();
        assert_eq!(said, [&json!("first"), &json!("second"), &json!(own)], "{id}");
        assert!(!said.contains(&&json!(other)));
        let chunks = replay
            .iter()
            .filter(|m| m["params"]["update"]["sessionUpdate"].as_str().is_some_and(|k| k.ends_with("_chunk")));
        assert!(
            chunks.clone().count() >= 6 && chunks.into_iter().all(|m| m["params"]["sessionId"] == id.as_str()),
            "{replay:?}"
        );
    }
}

#[tokio::test]
async fn lathe_sessions_fork_makes_a_copy_from_a_terminal() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    exchange(&mut h, &session, "first", "one").await;
    h.agent.close_stdin();
    h.agent.wait_exit(Duration::from_secs(10)).await.expect("lathe exits when stdin closes");
    let data: PathBuf = h.home.path().join(".local/share/lathe");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let command = SessionsCommand::Fork { id: session[..12].to_owned(), at: None };
    run(command, Some(&data), &mut out, false, &mut err).await.unwrap();
    let forked = String::from_utf8(out).unwrap().trim().to_owned();
    assert!(forked.starts_with("sess_") && forked != session, "{forked}");
    assert!(data.join("sessions").join(&forked).join("log.jsonl").is_file());

    h.agent = h.agent_with(&["--config", &h.home.path().join("config.toml").to_string_lossy()]);
    initialize(&mut h.agent, json!({})).await;
    let load = h.agent.request("session/load", json!({"sessionId": forked, "cwd": h.project, "mcpServers": []})).await;
    h.agent.response(load).await;
    exchange(&mut h, &forked, "second", "two").await;
    assert_eq!(last_history(&h), ["user: first", "assistant: one", "user: second"]);
}
