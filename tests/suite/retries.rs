//! Retrying the model endpoint through the real binary: 429, 5xx and
//! connection failures are retried with back-off and a visible reason,
//! `Retry-After` is honoured, other errors are not retried, the limits hold,
//! the final error names the attempts, and a cancel during a wait wins at once.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, prompt, thought_text, updates_of_kind};
use crate::support::harness::Harness;
use crate::support::mock_openai::{Reply, text_reply};

/// Retries with waits short enough to keep the suite fast.
const QUICK: &str = "[network]\nmax_retries = 3\nretry_initial_delay_secs = 0.01\nretry_max_delay_secs = 0.05\n";

fn status(status: u16, message: &str, retry_after: &str) -> Reply {
    Reply::Status {
        status,
        body: json!({"error": {"message": message}}).to_string(),
        headers: vec![("retry-after".into(), retry_after.into())],
    }
}

async fn prompt_and_wait(h: &mut Harness, session: &str) -> (Vec<Value>, Value) {
    let id = prompt(&mut h.agent, session, "hi").await;
    h.agent.response(id).await
}

fn error_of(response: &Value) -> &Value {
    assert!(response.get("error").is_some(), "expected an error, got {response}");
    &response["error"]
}

#[tokio::test]
async fn server_errors_are_retried_and_the_user_sees_why() {
    let mut h = Harness::with_config(QUICK).await;
    let session = h.session().await;
    h.mock.push(Reply::error(503, "overloaded"));
    h.mock.push(Reply::error(503, "overloaded"));
    h.mock.push(text_reply("finally"));
    let (before, response) = prompt_and_wait(&mut h, &session).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "finally");
    assert_eq!(h.mock.requests().len(), 3);
    let thoughts = updates_of_kind(&before, "agent_thought_chunk");
    assert_eq!(thoughts.len(), 2, "one line per wait: {thoughts:?}");
    for (thought, attempt) in thoughts.iter().zip(2..) {
        let text = thought["content"]["text"].as_str().unwrap();
        assert!(text.contains("HTTP 503") && text.contains("retrying in"), "{text}");
        assert!(text.contains(&format!("(attempt {attempt} of 4)")), "{text}");
        assert!(thought["messageId"].as_str().unwrap().starts_with("retry_"), "{thought}");
    }
    assert_ne!(thoughts[0]["messageId"], thoughts[1]["messageId"], "each line is its own message");
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let mut h = Harness::with_config(QUICK).await;
    let session = h.session().await;
    h.mock.push(status(429, "slow down", "1"));
    h.mock.push(text_reply("ok"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.mock.wait_for_requests(1, Duration::from_secs(5)).await;
    let first = Instant::now();
    h.mock.wait_for_requests(2, Duration::from_secs(5)).await;
    let waited = first.elapsed();
    // The back-off alone would be at most 10 ms.
    assert!(waited >= Duration::from_millis(900), "retried after {waited:?}");
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let thought = thought_text(&before);
    assert!(thought.contains("HTTP 429 (rate limited); retrying in 1 s as it asked (attempt 2 of 4)"), "{thought}");
}

#[tokio::test]
async fn other_client_errors_are_not_retried() {
    let mut h = Harness::with_config(QUICK).await;
    let session = h.session().await;
    h.mock.push(Reply::error(400, "unknown parameter"));
    h.mock.push(text_reply("never sent"));
    let (before, response) = prompt_and_wait(&mut h, &session).await;
    let error = error_of(&response);
    assert_eq!(error["data"]["kind"], "bad_request", "{error}");
    assert_eq!(error["data"]["status"], 400);
    assert!(error["data"].get("attempts").is_none(), "no retries, nothing to count: {error}");
    assert_eq!(h.mock.requests().len(), 1);
    assert!(thought_text(&before).is_empty());
}

#[tokio::test]
async fn exhausted_attempts_end_with_the_last_error_and_the_count() {
    let mut h = Harness::with_config(QUICK).await;
    let session = h.session().await;
    for _ in 0..4 {
        h.mock.push(Reply::error(500, "upstream exploded"));
    }
    let (before, response) = prompt_and_wait(&mut h, &session).await;
    let error = error_of(&response);
    assert_eq!(error["data"]["kind"], "server", "{error}");
    assert_eq!(error["data"]["status"], 500);
    assert_eq!(error["data"]["providerMessage"], "upstream exploded");
    assert_eq!(error["data"]["attempts"], 4);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("HTTP 500") && message.contains("after 4 attempts"), "{message}");
    assert!(!message.contains('\n'), "{message}");
    assert_eq!(h.mock.requests().len(), 4);
    assert_eq!(updates_of_kind(&before, "agent_thought_chunk").len(), 3);

    // The session is still usable.
    h.mock.push(text_reply("recovered"));
    let (before, response) = prompt_and_wait(&mut h, &session).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "recovered");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_retried() {
    let mut h = Harness::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = crate::support::write_config(
        h.home.path(),
        &format!("http://{closed}/v1"),
        "[network]\nmax_retries = 2\nretry_initial_delay_secs = 0.01\nretry_max_delay_secs = 0.02\n",
    );
    h.agent = h.agent_with(&["--config", config.to_str().unwrap()]);
    let session = h.session().await;
    let (before, response) = prompt_and_wait(&mut h, &session).await;
    let error = error_of(&response);
    assert_eq!(error["data"]["kind"], "network", "{error}");
    assert_eq!(error["data"]["attempts"], 3, "{error}");
    let thought = thought_text(&before);
    assert!(thought.contains("Could not reach the model endpoint"), "{thought}");
}

#[tokio::test]
async fn cancel_during_a_wait_wins_at_once() {
    let mut h = Harness::with_config(QUICK).await;
    let session = h.session().await;
    // The server asks for a long wait; the back-off settings do not shorten it.
    h.mock.push(status(503, "maintenance", "30"));
    h.mock.push(text_reply("too late"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    loop {
        let message = h.agent.next_message(Duration::from_secs(5)).await.expect("the retry line");
        if message["params"]["update"]["sessionUpdate"] == "agent_thought_chunk" {
            break;
        }
    }
    let cancelled_at = Instant::now();
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, response) = h.agent.response(id).await;
    let took = cancelled_at.elapsed();
    assert_eq!(response["result"], json!({"stopReason": "cancelled"}), "{response}");
    // About a millisecond here; the bound leaves room for a loaded machine.
    assert!(took < Duration::from_millis(500), "the cancel took {took:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.mock.requests().len(), 1, "no request after the cancel");
}

#[tokio::test]
async fn a_retry_after_beyond_the_budget_fails_fast() {
    let mut h = Harness::with_config(&format!("{QUICK}retry_max_total_secs = 5\n")).await;
    let session = h.session().await;
    h.mock.push(status(429, "daily quota reached", "3600"));
    let started = Instant::now();
    let (before, response) = prompt_and_wait(&mut h, &session).await;
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    let error = error_of(&response);
    assert_eq!(error["data"]["kind"], "rate_limited", "{error}");
    assert_eq!(error["data"]["retryAfterMs"], 3_600_000);
    assert_eq!(error["data"]["providerMessage"], "daily quota reached");
    assert_eq!(error["data"]["attempts"], 1);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("asked to wait 3600 s") && message.contains("retry budget"), "{message}");
    assert_eq!(h.mock.requests().len(), 1);
    assert!(thought_text(&before).is_empty(), "no wait announced");
}

/// The summary request of a compaction is retried like any other, with the
/// wait shown; the compaction then succeeds.
#[tokio::test]
async fn a_compaction_summary_is_retried() {
    let mut h = Harness::with_config(QUICK).await;
    let session = h.session().await;
    h.mock.push(text_reply("an answer worth keeping"));
    prompt_and_wait(&mut h, &session).await;
    h.mock.push(Reply::error(503, "overloaded"));
    h.mock.push(text_reply("SUMMARY: one question, one answer."));
    let id = prompt(&mut h.agent, &session, "/compact").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(agent_text(&before).contains("Compacted"), "{}", agent_text(&before));
    assert!(thought_text(&before).contains("HTTP 503"), "the wait is shown: {}", thought_text(&before));
    assert_eq!(h.mock.requests().len(), 3, "one answer, then the summary twice");
}
