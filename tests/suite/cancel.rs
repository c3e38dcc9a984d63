//! Cancellation through the real binary: `session/cancel` and
//! `$/cancel_request` answer the prompt `cancelled` fast, after all its
//! updates, whether the model is streaming or stalled; the HTTP stream is
//! closed; the conversation stays valid for the next prompt; a cancel on an
//! idle or unknown session changes nothing. Items 38-43 of `acp/spec-digest.md`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::acp_client::{agent_text, prompt};
use crate::support::harness::Harness;
use crate::support::mock_openai::{Reply, Step, ev_role, ev_text, text_reply};

/// Generous bound for a loaded CI machine; the real figure is measured by the benchmark.
const FAST: Duration = Duration::from_secs(2);

async fn wait_for_first_chunk(h: &mut Harness) -> Vec<serde_json::Value> {
    let mut seen = Vec::new();
    loop {
        let message = h.agent.next_message(Duration::from_secs(5)).await.expect("a first chunk");
        let is_chunk = message["params"]["update"]["sessionUpdate"] == "agent_message_chunk";
        seen.push(message);
        if is_chunk {
            return seen;
        }
    }
}

#[tokio::test]
async fn cancel_while_the_upstream_stalls() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("partial answ"), Step::Stall]));
    h.mock.push(text_reply("fresh answer"));

    let id = prompt(&mut h.agent, &session, "tell me everything").await;
    let seen = wait_for_first_chunk(&mut h).await;
    assert_eq!(agent_text(&seen), "partial answ");
    let cancelled_at = Instant::now();
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(cancelled_at.elapsed() < FAST, "took {:?}", cancelled_at.elapsed());
    assert_eq!(response["result"], json!({"stopReason": "cancelled"}), "never an error (item 40)");
    // The stalled HTTP stream was closed, not left hanging.
    h.mock.wait_for_disconnects(1, Duration::from_secs(5)).await;

    // The next prompt works and the model sees the interrupted answer, marked.
    let id = prompt(&mut h.agent, &session, "go on").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(agent_text(&before), "fresh answer");
    let request = &h.mock.requests()[1].body;
    let assistant = request["messages"][2]["content"].as_str().unwrap();
    assert!(assistant.starts_with("partial answ"), "{assistant}");
    assert!(assistant.contains("interrupted"), "{assistant}");
    assert_eq!(request["messages"][3]["content"], "go on");
}

#[tokio::test]
async fn cancel_while_streaming() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let mut steps = vec![ev_role()];
    for i in 0..200 {
        steps.push(ev_text(&format!("word{i} ")));
        steps.push(Step::Delay(Duration::from_millis(10)));
    }
    h.mock.push(Reply::Sse(steps));
    let id = prompt(&mut h.agent, &session, "stream a lot").await;
    wait_for_first_chunk(&mut h).await;
    let cancelled_at = Instant::now();
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (before, response) = h.agent.response(id).await;
    assert!(cancelled_at.elapsed() < FAST, "took {:?}", cancelled_at.elapsed());
    assert_eq!(response["result"]["stopReason"], "cancelled");
    // Updates sent after the cancel, if any, all came before the response (item 41):
    // nothing for this turn may follow it.
    assert!(before.iter().all(|m| m["method"] == "session/update"));
    assert!(h.agent.next_message(Duration::from_millis(300)).await.is_none(), "nothing after the response");
}

#[tokio::test]
async fn cancel_before_the_stream_starts() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![Step::Delay(Duration::from_secs(30)), ev_role(), ev_text("late")]));
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert_eq!(agent_text(&before), "");
}

/// `$/cancel_request` on the prompt's id also ends the turn with `cancelled` (item 43).
#[tokio::test]
async fn cancel_request_on_the_prompt_id() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("x"), Step::Stall]));
    let id = prompt(&mut h.agent, &session, "hi").await;
    wait_for_first_chunk(&mut h).await;
    h.agent.notify("$/cancel_request", json!({"requestId": id})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
}

/// A cancel on an idle or unknown session is a no-op and never poisons the next turn.
#[tokio::test]
async fn idle_and_unknown_cancels_change_nothing() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    h.agent.notify("session/cancel", json!({"sessionId": "sess_unknown"})).await;
    h.agent.notify("session/cancel", json!({})).await;
    assert!(h.agent.next_message(Duration::from_millis(200)).await.is_none(), "notifications get no answer");
    h.mock.push(text_reply("unaffected"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(agent_text(&before), "unaffected");
}

/// Closing stdin mid-turn cancels the turn, answers it, and exits 0 within a second.
#[tokio::test]
async fn eof_mid_turn_cancels_and_exits() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("x"), Step::Stall]));
    let id = prompt(&mut h.agent, &session, "hi").await;
    wait_for_first_chunk(&mut h).await;
    h.agent.close_stdin();
    let started = Instant::now();
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let status = h.agent.wait_exit(Duration::from_secs(3)).await.expect("exits");
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    h.mock.wait_for_disconnects(1, Duration::from_secs(5)).await;
}
