//! The model endpoint failing: HTTP errors, a stream that drops, a stream
//! that stalls, an endpoint that never answers, garbage in the stream. Each
//! ends the prompt with a JSON-RPC error that says what happened (never a
//! hang), and the session stays usable. The timeouts are the production
//! defaults, waited out in virtual time ([`FrozenClock`]).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, answer_at, prompt};
use crate::support::clock::FrozenClock;
use crate::support::harness::Harness;
use crate::support::mock_openai::{Reply, Step, ev_finish, ev_role, ev_text, text_reply};

async fn failed_prompt(h: &mut Harness, session: &str) -> (Vec<Value>, Value) {
    let id = prompt(&mut h.agent, session, "hi").await;
    let (before, response) = h.agent.response(id).await;
    assert!(response.get("error").is_some(), "expected an error, got {response}");
    (before, response["error"].clone())
}

async fn still_usable(h: &mut Harness, session: &str) {
    h.mock.push(text_reply("recovered"));
    let id = prompt(&mut h.agent, session, "again").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "recovered");
}

/// Retrying is tested in `retries.rs`; here every failure is final.
const NO_RETRIES: &str = "[network]\nmax_retries = 0\n";

#[tokio::test]
async fn http_errors_carry_status_kind_and_the_providers_message() {
    let mut h = Harness::with_config(NO_RETRIES).await;
    let session = h.session().await;
    for (status, message, kind) in [
        (401, "Incorrect API key provided", "auth"),
        (400, "model 'nope' not found", "bad_request"),
        (400, "This model's maximum context length is 8192 tokens", "context_overflow"),
        (500, "upstream exploded", "server"),
    ] {
        h.mock.push(Reply::error(status, message));
        let (_, error) = failed_prompt(&mut h, &session).await;
        let text = error["message"].as_str().unwrap();
        assert!(text.contains(&status.to_string()) && text.contains(message), "{error}");
        assert!(!text.contains('\n'), "one line: {text}");
        assert_eq!(error["data"]["kind"], kind, "{error}");
        assert_eq!(error["data"]["status"], status);
        assert_eq!(error["data"]["providerMessage"], message);
        assert_ne!(error["message"], "Internal error");
    }
    h.mock.push(Reply::Status {
        status: 429,
        body: json!({"error": {"message": "slow down"}}).to_string(),
        headers: vec![("retry-after".into(), "7".into())],
    });
    let (_, error) = failed_prompt(&mut h, &session).await;
    assert_eq!(error["data"]["kind"], "rate_limited");
    assert_eq!(error["data"]["retryAfterMs"], 7000);
    still_usable(&mut h, &session).await;
}

#[tokio::test]
async fn a_dropped_stream_keeps_the_partial_answer() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_text("half an ans"),
        Step::Delay(Duration::from_millis(50)),
        Step::Drop,
    ]));
    let (before, error) = failed_prompt(&mut h, &session).await;
    assert_eq!(agent_text(&before), "half an ans");
    assert!(error["message"].as_str().unwrap().contains("broke off"), "{error}");
    assert_eq!(error["data"]["kind"], "network");
    still_usable(&mut h, &session).await;
    let history = &h.mock.requests()[1].body["messages"];
    assert!(history[2]["content"].as_str().unwrap().starts_with("half an ans"), "{history}");
}

/// A request body is built in pieces (so a long conversation's body is not
/// one buffer that grows every turn) but sent as one body of its exact
/// length: servers are not all ready for a chunked request.
#[tokio::test]
async fn a_long_request_is_sent_with_its_exact_length_not_chunked() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let long = "forty thousand bytes of prompt ".repeat(1_300);
    for text in [long.as_str(), "short"] {
        h.mock.push(text_reply("ok"));
        let id = prompt(&mut h.agent, &session, text).await;
        let (_, response) = h.agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    }
    let requests = h.mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.header("transfer-encoding"), None, "{:?}", request.headers);
        assert_eq!(request.header("content-length"), Some(request.raw_body.len().to_string().as_str()));
        assert!(request.body.is_object(), "the body parses: {}", request.raw_body);
    }
    assert!(requests[1].raw_body.len() > 2 * 16 * 1024, "the body spans several pieces");
    assert_eq!(requests[1].body["messages"][1]["content"], long.as_str());
}

/// A stream that goes silent mid-answer ends the prompt once it has been
/// silent for `stream_idle_timeout_secs` (300 s by default), not a
/// millisecond before.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_times_out() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("thinking"), Step::Stall]));
    let id = prompt(&mut h.agent, &session, "hi").await;
    // The idle timer restarts with every event, the last one before this chunk.
    h.agent.until("the chunk", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    clock.advance(Duration::from_millis(299_999)).await;
    let meanwhile = h.agent.barrier().await;
    assert!(meanwhile.is_empty(), "still waiting after 299.999 s: {meanwhile:?}");
    clock.advance(Duration::from_millis(1)).await;
    let (_, response) = h.agent.response(id).await;
    let error = &response["error"];
    assert!(error["message"].as_str().unwrap().contains("stalled: nothing arrived for 300 s"), "{response}");
    assert_eq!(error["data"]["kind"], "timeout");
    h.mock.wait_for_disconnects(1, Duration::from_secs(5)).await;
    still_usable(&mut h, &session).await;
}

/// An endpoint that takes the request and never answers (not even the
/// status line) ends the prompt after `response_timeout_secs` (300 s by
/// default), and the connection is dropped.
#[tokio::test(start_paused = true)]
async fn an_endpoint_that_never_answers_times_out() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::with_config(NO_RETRIES).await;
    let session = h.session().await;
    h.mock.push(Reply::NoAnswer);
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.mock.wait_for_requests(1, Duration::from_secs(5)).await;
    clock.advance(Duration::from_millis(299_999)).await;
    let meanwhile = h.agent.barrier().await;
    assert!(answer_at(&meanwhile, id).is_none(), "still waiting after 299.999 s: {meanwhile:?}");
    clock.advance(Duration::from_millis(1)).await;
    let (_, response) = h.agent.response(id).await;
    let error = &response["error"];
    assert!(error["message"].as_str().unwrap().contains("did not answer within 300 s"), "{response}");
    assert_eq!(error["data"]["kind"], "timeout");
    h.mock.wait_for_disconnects(1, Duration::from_secs(5)).await;
    still_usable(&mut h, &session).await;
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_network_error() {
    let mut h = Harness::start().await;
    // Point the config at a port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = crate::support::write_config(h.home.path(), &format!("http://{closed}/v1"), NO_RETRIES);
    h.agent = h.agent_with(&["--config", config.to_str().unwrap()]);
    let session = h.session().await;
    let (_, error) = failed_prompt(&mut h, &session).await;
    assert_eq!(error["data"]["kind"], "network", "{error}");
    assert!(error["message"].as_str().unwrap().to_lowercase().contains("could not reach"), "{error}");
}

#[tokio::test]
async fn garbage_events_are_skipped() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        Step::Raw(": keep-alive comment\n\n".into()),
        Step::Raw("data: {not json at all\n\n".into()),
        ev_text("fine"),
        Step::Raw("data: {\"unexpected\":\"shape\"}\n\n".into()),
        ev_finish("stop"),
        Step::Done,
    ]));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "fine");
}

/// A stream in which no event is a chunk is an error the user can read, not
/// an empty answer, whether it ends with `[DONE]` or just ends.
#[tokio::test]
async fn a_stream_of_nothing_but_garbage_is_an_error() {
    let mut h = Harness::with_config(NO_RETRIES).await;
    let session = h.session().await;
    for done in [true, false] {
        let mut steps = vec![Step::Raw("data: {not json\n\n".into()), Step::Raw("data: [1,2]\n\n".into())];
        if done {
            steps.push(Step::Done);
        }
        h.mock.push(Reply::Sse(steps));
        let (_, error) = failed_prompt(&mut h, &session).await;
        assert_eq!(error["data"]["kind"], "server", "{error}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains("none of its 2 events was a chat completion chunk"), "[DONE]: {done}: {message}");
    }
    still_usable(&mut h, &session).await;
}

#[tokio::test]
async fn an_error_inside_the_stream_ends_the_prompt() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_text("par"),
        Step::Event(json!({"error": {"message": "provider overloaded", "code": 502}})),
        Step::Done,
    ]));
    let (_, error) = failed_prompt(&mut h, &session).await;
    assert!(error["message"].as_str().unwrap().contains("provider overloaded"), "{error}");
    still_usable(&mut h, &session).await;
}

/// The API key goes in the Authorization header and nowhere else.
#[tokio::test]
async fn the_api_key_is_sent_and_never_logged() {
    let secret = "sk-test-very-secret-key-123";
    // The binary: everything it logs, from any thread, at trace level.
    let mut h =
        Harness::process("api_key_env = \"LATHE_TEST_KEY\"\n", &[("LATHE_TEST_KEY", secret), ("RUST_LOG", "trace")])
            .await;
    let session = h.session().await;
    h.mock.push(Reply::error(401, "bad key"));
    failed_prompt(&mut h, &session).await;
    let request = &h.mock.requests()[0];
    assert_eq!(request.header("authorization"), Some(format!("Bearer {secret}").as_str()));
    h.agent.close_stdin();
    h.agent.wait_exit(Duration::from_secs(3)).await;
    assert!(!h.agent.stderr().contains(secret), "the key leaked into the logs");
    assert!(!h.agent.raw_stdout_lines().join("\n").contains(secret), "the key leaked into the protocol");
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(text_reply("ok"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.agent.response(id).await;
    assert_eq!(h.mock.requests()[0].header("authorization"), None);
}

/// An endless line in the stream ends the prompt with an error instead of
/// keeping a core busy (the SSE parser re-scans its buffer on every chunk).
/// Without the cut the stream would stall after the 5 MB and the prompt
/// never be answered (the response wait's bound would fail the test).
#[tokio::test]
async fn an_endless_sse_line_is_cut_off() {
    let mut h = Harness::with_config(NO_RETRIES).await;
    // A hang detector, not a speed claim: a debug build scanning megabytes
    // on a loaded machine can take longer than the default bound.
    h.agent.set_timeout(Duration::from_secs(60));
    let session = h.session().await;
    let mut steps = vec![ev_role(), ev_text("start ")];
    steps.push(Step::Raw("data: {\"junk\":\"".to_owned()));
    for _ in 0..5 {
        steps.push(Step::Raw("x".repeat(1024 * 1024)));
    }
    steps.push(Step::Stall);
    h.mock.push(Reply::Sse(steps));
    let (before, error) = failed_prompt(&mut h, &session).await;
    assert_eq!(agent_text(&before), "start ");
    assert_eq!(error["data"]["kind"], "network", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("a line longer than 4194304 bytes"), "the error says why: {message}");
    still_usable(&mut h, &session).await;
    h.agent.close_stdin();
    h.agent.wait_exit(Duration::from_secs(3)).await;
    assert!(h.agent.stderr().contains("a line is longer than the limit"), "the log says why");
}
