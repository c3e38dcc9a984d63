//! Steering (issue 30 item 4): the de-facto `_session/steering` extension
//! as codex-acp answers it. A message sent while a turn runs is read before
//! the turn's next model request (never in the middle of a tool call) and
//! shown as the user's; one sent while no turn runs starts a turn
//! (`startedNewTurn`), or, when the client asks for that, is left for it to
//! send as a prompt (`promptRequired`); none is lost across `session/load`.
//! (Enter and Alt-Enter in `lathe chat` are in `term_chat`.)

use serde_json::{Value, json};

use crate::support::acp_client::{initialize, prompt, updates_of_kind};
use crate::support::harness::Harness;
use crate::support::mock_openai::{
    Gate, RecordedRequest, Reply, Step, ev_finish, ev_role, ev_text, ev_tool_call_args, ev_tool_call_start, text_reply,
};

/// A reply that writes `text`, waits at `gate`, then calls `read_file` on
/// `notes.txt` (or ends, without `call`).
fn gated(text: &str, gate: &Gate, call: Option<&str>) -> Reply {
    let mut steps = vec![ev_role(), ev_text(text), Step::Gate(gate.clone())];
    match call {
        Some(id) => {
            steps.push(ev_tool_call_start(0, id, "read_file"));
            steps.push(ev_tool_call_args(0, r#"{"path": "notes.txt"}"#));
            steps.push(ev_finish("tool_calls"));
        }
        None => steps.push(ev_finish("stop")),
    }
    steps.push(Step::Done);
    Reply::Sse(steps)
}

async fn steer(h: &mut Harness, session: &str, text: &str, meta: Option<Value>) -> Value {
    let mut params = json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let id = h.agent.request("_session/steering", params).await;
    let (_, response) = h.agent.response(id).await;
    response
}

/// The text of the user messages of a request, in order.
fn user_texts(request: &RecordedRequest) -> Vec<String> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().map_or_else(|| m["content"].to_string(), str::to_owned))
        .collect()
}

async fn first_chunk(h: &mut Harness) -> Vec<Value> {
    let (mut seen, chunk) =
        h.agent.until("the first chunk", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    seen.push(chunk);
    seen
}

#[tokio::test]
async fn a_steer_during_a_slow_stream_is_read_by_the_next_request_of_the_turn() {
    let mut h = Harness::start().await;
    let result = initialize(&mut h.agent, json!({})).await;
    assert_eq!(result["_meta"]["steering"], json!({"supported": true}), "advertised as codex-acp does: {result}");
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap().to_owned();
    std::fs::write(h.project.join("notes.txt"), "a note\n").unwrap();

    let gate = Gate::new();
    h.mock.push(gated("Reading.", &gate, Some("call_r")));
    h.mock.push(text_reply("Done, and I looked at the README too."));
    let id = prompt(&mut h.agent, &session, "read the notes").await;
    first_chunk(&mut h).await;
    let response = steer(&mut h, &session, "also look at the README", None).await;
    assert_eq!(response["result"], json!({"outcome": "injected"}), "{response}");
    gate.open();
    let (seen, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let requests = h.mock.chat_requests();
    assert_eq!(requests.len(), 2, "one turn, two requests");
    assert_eq!(user_texts(&requests[0]), ["read the notes"]);
    assert_eq!(user_texts(&requests[1]), ["read the notes", "also look at the README"]);
    // After the tool's result, not inside the call: the call and its
    // result stay together.
    let messages = requests[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    // Shown to the user, where it was read.
    let shown = updates_of_kind(&seen, "user_message_chunk");
    assert_eq!(shown.len(), 1, "{seen:?}");
    assert_eq!(shown[0]["content"]["text"], "also look at the README");
    assert!(shown[0]["messageId"].as_str().unwrap().starts_with("steer_"));
}

/// A steer that comes while the model writes its final answer is read by
/// one more request of the same turn, not left for later.
#[tokio::test]
async fn a_steer_during_the_last_answer_keeps_the_turn_going() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let gate = Gate::new();
    h.mock.push(gated("All done.", &gate, None));
    h.mock.push(text_reply("Shorter, then: done."));
    let id = prompt(&mut h.agent, &session, "summarise").await;
    first_chunk(&mut h).await;
    let response = steer(&mut h, &session, "make it shorter", None).await;
    assert_eq!(response["result"]["outcome"], "injected");
    gate.open();
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let requests = h.mock.chat_requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(user_texts(&requests[1]), ["summarise", "make it shorter"]);
}

/// No turn runs: the steer starts one (its updates stream with no
/// `session/prompt` to answer); with `idleBehavior: "promptRequired"` it
/// does not, and says so.
#[tokio::test]
async fn a_steer_with_no_turn_running_starts_one_unless_the_client_prompts_itself() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let meta = json!({"steering": {"idleBehavior": "promptRequired"}});
    let response = steer(&mut h, &session, "are you there?", Some(meta)).await;
    assert_eq!(response["result"], json!({"outcome": "promptRequired", "reason": "noRunningTurn"}));
    assert!(h.mock.chat_requests().is_empty());

    h.mock.push(text_reply("Yes, here."));
    let params = json!({"sessionId": session, "prompt": [{"type": "text", "text": "are you there?"}]});
    let id = h.agent.request("_session/steering", params).await;
    let (mut seen, response) = h.agent.response(id).await;
    assert_eq!(response["result"], json!({"outcome": "startedNewTurn"}), "{response}");
    let (more, _) =
        h.agent.until("the answer's usage", |m| m["params"]["update"]["sessionUpdate"] == "usage_update").await;
    seen.extend(more);
    let shown = updates_of_kind(&seen, "user_message_chunk");
    assert_eq!(shown.first().map(|u| &u["content"]["text"]), Some(&json!("are you there?")), "{seen:?}");
    h.agent.barrier().await;
    assert_eq!(user_texts(&h.mock.chat_requests()[0]), ["are you there?"]);

    // An unknown session is -32002; an empty message -32602.
    let response = steer(&mut h, "sess_nope", "hello", None).await;
    assert_eq!(response["error"]["code"], -32002);
    let id = h.agent.request("_session/steering", json!({"sessionId": session, "prompt": []})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["error"]["code"], -32602);
}

/// A steer the turn did not read (it was cancelled first) waits, on disk:
/// after the session is loaded in a new process, the next prompt carries
/// it. A steer that was read is part of the history the load replays.
#[tokio::test]
async fn no_steer_is_lost_across_a_load() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    std::fs::write(h.project.join("notes.txt"), "a note\n").unwrap();

    // Read by the turn.
    let gate = Gate::new();
    h.mock.push(gated("Reading.", &gate, Some("call_r")));
    h.mock.push(text_reply("Read."));
    let id = prompt(&mut h.agent, &session, "read the notes").await;
    first_chunk(&mut h).await;
    steer(&mut h, &session, "and count the lines", None).await;
    gate.open();
    h.agent.response(id).await;

    // Not read: the turn is cancelled while the model still streams.
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("Thinking"), Step::Stall]));
    let id = prompt(&mut h.agent, &session, "now the other file").await;
    first_chunk(&mut h).await;
    assert_eq!(steer(&mut h, &session, "use the backup copy", None).await["result"]["outcome"], "injected");
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");

    h.restart().await;
    initialize(&mut h.agent, json!({})).await;
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    let (replay, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let users: Vec<&Value> =
        updates_of_kind(&replay, "user_message_chunk").into_iter().map(|u| &u["content"]["text"]).collect();
    assert_eq!(users, [&json!("read the notes"), &json!("and count the lines"), &json!("now the other file")]);

    h.mock.push(text_reply("Using the backup."));
    let id = prompt(&mut h.agent, &session, "go on").await;
    let (seen, _) = h.agent.response(id).await;
    let requests = h.mock.chat_requests();
    let last = user_texts(&requests[requests.len() - 1]);
    assert_eq!(last.last().map(String::as_str), Some("go on\n\nuse the backup copy"), "{last:?}");
    assert!(last.contains(&"and count the lines".to_owned()), "the read steer is history: {last:?}");
    let shown = updates_of_kind(&seen, "user_message_chunk");
    assert!(shown.iter().any(|u| u["content"]["text"] == "use the backup copy"), "{seen:?}");
}
