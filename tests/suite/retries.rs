//! Retrying the model endpoint: 429, 5xx and connection failures are retried
//! with back-off and a visible reason, `Retry-After` is honoured, other
//! errors are not retried, the limits hold, the final error names the
//! attempts, and a cancel during a wait wins at once.
//!
//! In virtual time: each test holds a frozen clock ([`FrozenClock`]) and
//! moves it on only after the agent has said (the retry line) that it is
//! waiting, so the back-off and `Retry-After` waits are the production
//! defaults (seconds) and are checked to the millisecond, and the tests take
//! no time.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, prompt, thought_text, updates_of_kind};
use crate::support::clock::FrozenClock;
use crate::support::harness::Harness;
use crate::support::mock_openai::{Reply, text_reply};

/// Hang detector for the mock's waits (real time).
const WAIT: Duration = Duration::from_secs(5);

fn status(status: u16, message: &str, retry_after: &str) -> Reply {
    Reply::Status {
        status,
        body: json!({"error": {"message": message}}).to_string(),
        headers: vec![("retry-after".into(), retry_after.into())],
    }
}

fn error_of(response: &Value) -> &Value {
    assert!(response.get("error").is_some(), "expected an error, got {response}");
    &response["error"]
}

fn is_retry_line(message: &Value) -> bool {
    message["params"]["update"]["sessionUpdate"] == "agent_thought_chunk"
        && message["params"]["update"]["messageId"].as_str().is_some_and(|id| id.starts_with("retry_"))
}

/// Waits for the next retry line and returns its text. The turn starts its
/// wait in the same step in which it sends the line, so once the line is
/// here the wait's timer is set.
async fn retry_line(h: &mut Harness) -> String {
    let (_, line) = h.agent.until("a retry line", is_retry_line).await;
    line["params"]["update"]["content"]["text"].as_str().unwrap().to_owned()
}

/// The default back-off ceilings (`[network]` defaults: 1 s, doubling, 30 s
/// at most): a retry waits a random time up to its ceiling.
fn ceiling(retry: u32) -> Duration {
    Duration::from_secs(1 << (retry - 1)).min(Duration::from_secs(30))
}

#[tokio::test(start_paused = true)]
async fn server_errors_are_retried_and_the_user_sees_why() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::error(503, "overloaded"));
    h.mock.push(Reply::error(503, "overloaded"));
    h.mock.push(text_reply("finally"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let mut seen = Vec::new();
    for retry in 1..=2 {
        let (before, line) = h.agent.until("a retry line", is_retry_line).await;
        seen.extend(before);
        seen.push(line);
        assert_eq!(h.mock.requests().len(), retry as usize, "no request before the wait is over");
        clock.advance(ceiling(retry)).await;
        h.mock.wait_for_requests(retry as usize + 1, WAIT).await;
    }
    let (before, response) = h.agent.response(id).await;
    seen.extend(before);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&seen), "finally");
    assert_eq!(h.mock.requests().len(), 3);
    let thoughts = updates_of_kind(&seen, "agent_thought_chunk");
    assert_eq!(thoughts.len(), 2, "one line per wait: {thoughts:?}");
    for (thought, attempt) in thoughts.iter().zip(2..) {
        let text = thought["content"]["text"].as_str().unwrap();
        assert!(text.contains("HTTP 503") && text.contains("retrying in"), "{text}");
        assert!(text.contains(&format!("(attempt {attempt} of 5)")), "{text}");
    }
    assert_ne!(thoughts[0]["messageId"], thoughts[1]["messageId"], "each line is its own message");
}

/// The endpoint's `Retry-After` replaces the back-off: no request a
/// millisecond before it is over, the next one as soon as it is.
#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_to_the_millisecond() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(status(429, "slow down", "7"));
    h.mock.push(text_reply("ok"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let line = retry_line(&mut h).await;
    assert!(line.contains("HTTP 429 (rate limited); retrying in 7 s as it asked (attempt 2 of 5)"), "{line}");

    clock.advance(Duration::from_millis(6_999)).await;
    h.agent.barrier().await;
    assert_eq!(h.mock.requests().len(), 1, "not retried before the 7 s the server asked for");
    clock.advance(Duration::from_millis(1)).await;
    h.mock.wait_for_requests(2, WAIT).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(clock.elapsed(), Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn other_client_errors_are_not_retried() {
    let _clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::error(400, "unknown parameter"));
    h.mock.push(text_reply("never sent"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    // Answered under a frozen clock: no wait was even started.
    let (before, response) = h.agent.response(id).await;
    let error = error_of(&response);
    assert_eq!(error["data"]["kind"], "bad_request", "{error}");
    assert_eq!(error["data"]["status"], 400);
    assert!(error["data"].get("attempts").is_none(), "no retries, nothing to count: {error}");
    assert_eq!(h.mock.requests().len(), 1);
    assert!(thought_text(&before).is_empty());
}

#[tokio::test(start_paused = true)]
async fn exhausted_attempts_end_with_the_last_error_and_the_count() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::with_config("[network]\nmax_retries = 3\n").await;
    let session = h.session().await;
    for _ in 0..4 {
        h.mock.push(Reply::error(500, "upstream exploded"));
    }
    let id = prompt(&mut h.agent, &session, "hi").await;
    for retry in 1..=3 {
        retry_line(&mut h).await;
        clock.advance(ceiling(retry)).await;
    }
    let (before, response) = h.agent.response(id).await;
    let error = error_of(&response);
    assert_eq!(error["data"]["kind"], "server", "{error}");
    assert_eq!(error["data"]["status"], 500);
    assert_eq!(error["data"]["providerMessage"], "upstream exploded");
    assert_eq!(error["data"]["attempts"], 4);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("HTTP 500") && message.contains("after 4 attempts"), "{message}");
    assert!(!message.contains('\n'), "{message}");
    assert_eq!(h.mock.requests().len(), 4);
    assert!(updates_of_kind(&before, "agent_thought_chunk").is_empty(), "three lines, no fourth");

    // The session is still usable.
    h.mock.push(text_reply("recovered"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "recovered");
}

/// Waiting counts against `retry_max_total`: once the budget is spent the
/// turn stops retrying, whatever attempts are left.
#[tokio::test(start_paused = true)]
async fn the_total_wait_is_bounded_by_the_budget() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::with_config("[network]\nmax_retries = 50\nretry_max_total_secs = 10\n").await;
    let session = h.session().await;
    h.mock.rule(|_| Some(Reply::error(503, "overloaded")));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let mut retries = 0;
    let response = loop {
        let (before, message) =
            h.agent.until("a retry line or the answer", |m| is_retry_line(m) || m["id"] == json!(id)).await;
        assert!(before.iter().all(|m| m["method"] == "session/update"), "{before:?}");
        if !is_retry_line(&message) {
            break message;
        }
        retries += 1;
        clock.advance(ceiling(retries)).await;
    };
    let error = error_of(&response);
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("the 10 s retry budget (network.retry_max_total_secs) is used up"), "{message}");
    assert_eq!(error["data"]["attempts"], retries + 1, "{error}");
    assert!(retries < 50, "the budget, not the attempts, ended it");
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_endpoint_is_retried() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config =
        crate::support::write_config(h.home.path(), &format!("http://{closed}/v1"), "[network]\nmax_retries = 2\n");
    h.agent = h.agent_with(&["--config", config.to_str().unwrap()]);
    let session = h.session().await;
    let id = prompt(&mut h.agent, &session, "hi").await;
    for retry in 1..=2 {
        let line = retry_line(&mut h).await;
        assert!(line.contains("Could not reach the model endpoint"), "{line}");
        clock.advance(ceiling(retry)).await;
    }
    let (_, response) = h.agent.response(id).await;
    let error = error_of(&response);
    assert_eq!(error["data"]["kind"], "network", "{error}");
    assert_eq!(error["data"]["attempts"], 3, "{error}");
}

/// A cancel during a long wait is answered under the frozen clock (so
/// without waiting out anything), and no request follows, however long one
/// then waits.
#[tokio::test(start_paused = true)]
async fn cancel_during_a_wait_wins_at_once() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    // The server asks for a long wait; the back-off settings do not shorten it.
    h.mock.push(status(503, "maintenance", "30"));
    h.mock.push(text_reply("too late"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    retry_line(&mut h).await;
    h.agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"], json!({"stopReason": "cancelled"}), "{response}");
    assert_eq!(clock.elapsed(), Duration::ZERO, "answered without waiting");
    clock.advance(Duration::from_secs(3600)).await;
    h.agent.barrier().await;
    assert_eq!(h.mock.requests().len(), 1, "no request after the cancel");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_budget_fails_fast() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::with_config("[network]\nretry_max_total_secs = 5\n").await;
    let session = h.session().await;
    h.mock.push(status(429, "daily quota reached", "3600"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(clock.elapsed(), Duration::ZERO, "answered without waiting");
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
#[tokio::test(start_paused = true)]
async fn a_compaction_summary_is_retried() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(text_reply("an answer worth keeping"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.agent.response(id).await;
    h.mock.push(Reply::error(503, "overloaded"));
    h.mock.push(text_reply("SUMMARY: one question, one answer."));
    let id = prompt(&mut h.agent, &session, "/compact").await;
    let line = retry_line(&mut h).await;
    assert!(line.contains("HTTP 503"), "the wait is shown: {line}");
    clock.advance(ceiling(1)).await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(agent_text(&before).contains("Compacted"), "{}", agent_text(&before));
    assert_eq!(h.mock.requests().len(), 3, "one answer, then the summary twice");
}
