//! Prompt turns against the mock model: streaming
//! text and reasoning, usage, the request the model receives (system prompt,
//! whole history, content blocks), and the mapping of finish reasons to stop
//! reasons. Item numbers refer to `acp/spec-digest.md`.

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, prompt, thought_text, updates_of_kind};
use crate::support::clock::FrozenClock;
use crate::support::harness::Harness;
use crate::support::mock_openai::{
    Reply, Step, chunk, ev_finish, ev_reasoning, ev_reasoning_field, ev_role, ev_text, ev_tool_call_args,
    ev_tool_call_start, ev_usage, text_reply, tool_call_reply,
};

/// Item 30, 37, 41: streamed chunks with a messageId, all before the response.
#[tokio::test]
async fn text_and_reasoning_stream_as_chunks_before_the_response() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_reasoning("Let me "),
        ev_reasoning_field("think."),
        ev_text("Hel"),
        ev_text("lo"),
        ev_text(", world"),
        ev_finish("stop"),
        ev_usage(120, 7),
        Step::Done,
    ]));
    let id = prompt(&mut h.agent, &session, "Say hello").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(
        response["result"],
        json!({"stopReason": "end_turn", "usage": {"totalTokens": 127, "inputTokens": 120, "outputTokens": 7}})
    );
    assert_eq!(agent_text(&before), "Hello, world");
    assert_eq!(thought_text(&before), "Let me think.");

    let chunks = updates_of_kind(&before, "agent_message_chunk");
    let message_id = chunks[0]["messageId"].as_str().expect("chunks carry a messageId");
    assert!(chunks.iter().all(|c| c["messageId"] == message_id), "one message, one id");
    let thoughts = updates_of_kind(&before, "agent_thought_chunk");
    assert!(thoughts[0]["messageId"].is_string());
    assert_ne!(thoughts[0]["messageId"], chunks[0]["messageId"]);

    let usage = updates_of_kind(&before, "usage_update");
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0]["used"], 127);
    assert_eq!(usage[0]["size"], 32768, "size is the configured context window");

    // Every notification belongs to this session and precedes the response.
    for message in &before {
        assert_eq!(message["method"], "session/update");
        assert_eq!(message["params"]["sessionId"], session.as_str());
    }
    h.agent.assert_stdout_is_only_jsonrpc();
}

fn roles(request: &Value) -> Vec<String> {
    request["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn the_model_gets_the_system_prompt_and_the_whole_conversation() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(text_reply("First answer."));
    h.mock.push(text_reply("Second answer."));

    let id = prompt(&mut h.agent, &session, "First question").await;
    h.agent.response(id).await;
    let id = prompt(&mut h.agent, &session, "Second question").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let requests = h.mock.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0].body;
    assert_eq!(first["model"], "mock-model");
    assert_eq!(first["stream"], true);
    assert_eq!(first["stream_options"]["include_usage"], true);
    assert_eq!(first["max_tokens"], 1024);
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("You are lathe"), "the system prompt comes from prompts/system.md");
    assert!(system.contains(h.project.to_str().unwrap()), "the system prompt names the cwd");
    let second = &requests[1].body;
    assert_eq!(roles(second), ["system", "user", "assistant", "user"]);
    assert_eq!(second["messages"][1]["content"], "First question");
    assert_eq!(second["messages"][2]["content"], "First answer.");
    assert_eq!(second["messages"][3]["content"], "Second question");
    // The fixed prefix is byte-identical across requests (provider prompt caches).
    assert_eq!(first["messages"][0], second["messages"][0]);
    assert_eq!(first["tools"], second["tools"]);
}

#[tokio::test]
async fn resource_links_and_embedded_resources_reach_the_model() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(text_reply("ok"));
    let id = h
        .agent
        .request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [
                {"type": "text", "text": "Look at these"},
                {"type": "resource_link", "uri": "file:///p/src/main.rs", "name": "main.rs"},
                {"type": "resource", "resource": {"uri": "file:///p/notes.md", "text": "remember the milk", "mimeType": "text/markdown"}}
            ]}),
        )
        .await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let user = h.mock.requests()[0].body["messages"][1]["content"].as_str().unwrap().to_owned();
    assert!(user.contains("Look at these"), "{user}");
    assert!(user.contains("[@main.rs](file:///p/src/main.rs)"), "{user}");
    assert!(user.contains("file:///p/notes.md") && user.contains("remember the milk"), "{user}");
}

#[tokio::test]
async fn images_need_a_vision_model() {
    let image = json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"});
    let mut h = Harness::start().await;
    let session = h.session().await;
    let id = h.agent.request("session/prompt", json!({"sessionId": session, "prompt": [image.clone()]})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert!(response["error"]["message"].as_str().unwrap().contains("vision"), "{response}");

    let mut h = Harness::with_config("vision = true\n").await;
    let session = h.session().await;
    h.mock.push(text_reply("a tiny image"));
    let id = h
        .agent
        .request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "what is this"}, image]}),
        )
        .await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let parts = &h.mock.requests()[0].body["messages"][1]["content"];
    assert_eq!(parts[0], json!({"type": "text", "text": "what is this"}));
    assert_eq!(parts[1]["image_url"]["url"], "data:image/png;base64,iVBORw0KGgo=");
}

#[tokio::test]
async fn finish_reason_length_is_max_tokens() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("cut o"), ev_finish("length"), Step::Done]));
    let id = prompt(&mut h.agent, &session, "long answer please").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "max_tokens");
}

/// A refusal ends the turn with `refusal`, and the refused prompt is left out
/// of the next request.
#[tokio::test]
async fn content_filter_is_refusal_and_the_prompt_is_dropped() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("I can't"), ev_finish("content_filter"), Step::Done]));
    h.mock.push(text_reply("Sure."));
    let id = prompt(&mut h.agent, &session, "something forbidden").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "refusal");
    let id = prompt(&mut h.agent, &session, "something fine").await;
    h.agent.response(id).await;
    let second = &h.mock.requests()[1].body;
    assert_eq!(roles(second), ["system", "user"]);
    assert_eq!(second["messages"][1]["content"], "something fine");
}

/// The configured cap on model requests per turn ends a tool loop with `max_turn_requests`.
#[tokio::test]
async fn the_request_cap_is_max_turn_requests() {
    let mut h = Harness::with_config("[agent]\nmax_model_requests_per_turn = 2\n").await;
    let session = h.session().await;
    let plan = json!({"plan": [{"content": "step", "status": "in_progress"}]});
    h.mock.push(tool_call_reply(&[("call_a", "update_plan", plan.clone())]));
    h.mock.push(tool_call_reply(&[("call_b", "update_plan", plan)]));
    let id = prompt(&mut h.agent, &session, "loop forever").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "max_turn_requests", "{response}");
    assert_eq!(h.mock.requests().len(), 2);
}

/// Usage reported on every chunk (some servers do) is counted once, from the last.
#[tokio::test]
async fn usage_on_every_chunk_uses_the_last_figures() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let with_usage = |delta: Value, finish: Option<&str>, p: u64, c: u64| {
        let mut value = chunk(delta, finish);
        value["usage"] = json!({"prompt_tokens": p, "completion_tokens": c});
        Step::Event(value)
    };
    h.mock.push(Reply::Sse(vec![
        with_usage(json!({"content": "a"}), None, 50, 1),
        with_usage(json!({"content": "b"}), None, 50, 2),
        with_usage(json!({}), Some("stop"), 50, 3),
        Step::Done,
    ]));
    let id = prompt(&mut h.agent, &session, "count").await;
    let (before, _) = h.agent.response(id).await;
    let usage = updates_of_kind(&before, "usage_update");
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0]["used"], 53);
}

/// A server that ignores `stream: true` and answers one JSON body still works.
#[tokio::test]
async fn a_plain_json_answer_is_read_like_a_stream() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Whole answer."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    })));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "Whole answer.");
}

/// A prompt that arrives while a turn runs is queued and runs next, in order;
/// a queued prompt that is cancelled answers `cancelled` and never runs.
/// Under a frozen clock the first answer pauses half-way for as long as the
/// test wants: the second prompt arrives while it runs, whatever the
/// machine's speed.
#[tokio::test(start_paused = true)]
async fn prompts_that_arrive_while_a_turn_runs_are_queued() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_text("slow"),
        Step::Delay(std::time::Duration::from_secs(1)),
        ev_text(" answer"),
        ev_finish("stop"),
        Step::Done,
    ]));
    h.mock.push(text_reply("second answer"));
    let first = prompt(&mut h.agent, &session, "one").await;
    let (mut early, chunk) =
        h.agent.until("the first chunk", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    early.push(chunk);
    let second = prompt(&mut h.agent, &session, "two").await;
    early.extend(h.agent.barrier().await);
    assert_eq!(h.mock.requests().len(), 1, "the second prompt waits for the first turn");
    clock.advance(std::time::Duration::from_secs(1)).await;
    let (rest, response) = h.agent.response(first).await;
    early.extend(rest);
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(agent_text(&early), "slow answer");
    let (late, response) = h.agent.response(second).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&late), "second answer");
    let requests = h.mock.requests();
    assert_eq!(requests[1].body["messages"][3]["content"], "two", "the second ran after the first, with its history");

    // Cancelled while queued: it answers cancelled and never reaches the model.
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("stuck"), Step::Stall]));
    let running = prompt(&mut h.agent, &session, "three").await;
    let queued = prompt(&mut h.agent, &session, "four").await;
    // "three" is running (its answer has started) before anything is cancelled.
    h.agent.until("the third answer", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    h.agent.notify("$/cancel_request", json!({"requestId": queued})).await;
    let (_, response) = h.agent.response(queued).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, response) = h.agent.response(running).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert_eq!(h.mock.requests().len(), 3, "the cancelled queued prompt never reached the model");
}

/// The prompt response carries the turn's token totals, summed over its model
/// requests (a tool round makes two), and none when the server reported none.
#[tokio::test]
async fn the_prompt_response_sums_the_turns_token_usage() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_tool_call_start(0, "call_plan", "update_plan"),
        ev_tool_call_args(0, r#"{"plan":[{"step":"look","status":"in_progress"}]}"#),
        ev_finish("tool_calls"),
        ev_usage(100, 10),
        Step::Done,
    ]));
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("done"), ev_finish("stop"), ev_usage(150, 5), Step::Done]));
    let id = prompt(&mut h.agent, &session, "plan it").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(response["result"]["usage"], json!({"totalTokens": 265, "inputTokens": 250, "outputTokens": 15}));

    // The next turn starts from zero, and a server that reports no usage gets none.
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("no usage here"), ev_finish("stop"), Step::Done]));
    let id = prompt(&mut h.agent, &session, "again").await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"], json!({"stopReason": "end_turn"}));
}
