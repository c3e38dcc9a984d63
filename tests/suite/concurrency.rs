//! Concurrency: many sessions prompting at once each
//! get their own answer and exactly one response, and a cancel racing the
//! natural end of a turn yields exactly one response, `end_turn` or
//! `cancelled`, never an error, with nothing for that turn after it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, prompt};
use crate::support::clock::FrozenClock;
use crate::support::harness::Harness;
use crate::support::mock_openai::{Reply, Step, ev_finish, ev_role, ev_text, ev_usage};

const SESSIONS: usize = 8;
/// How long each answer pauses after its first chunk (virtual time).
const PAUSE: Duration = Duration::from_secs(1);
const RACES: u64 = 50;

fn is_response(message: &Value) -> bool {
    message.get("method").is_none() && (message.get("result").is_some() || message.get("error").is_some())
}

/// A streamed answer: `head`, a pause of `pause`, then `tail` and the end.
fn paused_reply(head: &str, pause: Duration, tail: &str) -> Reply {
    Reply::Sse(vec![
        ev_role(),
        ev_text(head),
        Step::Delay(pause),
        ev_text(tail),
        ev_finish("stop"),
        ev_usage(10, 2),
        Step::Done,
    ])
}

/// The text of the last user message of a recorded chat request.
fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    let user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    match &user["content"] {
        Value::String(text) => text.clone(),
        parts => parts.as_array().unwrap().iter().filter_map(|p| p["text"].as_str()).collect(),
    }
}

/// Eight sessions prompt at once. Every turn is in flight at the same time
/// (each has streamed its first chunk before any prompt is answered: under a
/// frozen clock every answer pauses after its first chunk until the test
/// moves the clock on, however slow the machine), and each session gets
/// exactly one response and exactly the answer the mock sent for its own
/// request.
#[tokio::test(start_paused = true)]
async fn many_sessions_prompt_at_once() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    let mut sessions = Vec::new();
    sessions.push(h.session().await);
    for _ in 1..SESSIONS {
        let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
        let (_, response) = h.agent.response(id).await;
        sessions.push(response["result"]["sessionId"].as_str().unwrap().to_owned());
    }
    // The mock answers in arrival order: reply k goes to the k-th request.
    for k in 0..SESSIONS {
        h.mock.push(paused_reply("answer-", PAUSE, &k.to_string()));
    }
    let mut prompts = HashMap::new();
    for (s, session) in sessions.iter().enumerate() {
        let id = prompt(&mut h.agent, session, &format!("question-{s}")).await;
        prompts.insert(id, session.clone());
    }

    let mut messages = Vec::new();
    let mut streaming = HashSet::new();
    while streaming.len() < SESSIONS {
        let message = h.agent.expect_message("every turn's first chunk").await;
        assert!(!is_response(&message), "a prompt was answered while the clock stood still: {message}");
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            streaming.insert(message["params"]["sessionId"].as_str().unwrap().to_owned());
        }
        messages.push(message);
    }
    clock.advance(PAUSE).await;
    let mut responses: HashMap<i64, Vec<Value>> = HashMap::new();
    while responses.len() < SESSIONS {
        let Some(message) = h.agent.next_message(Duration::from_secs(5)).await else {
            panic!("only {} responses\n--- agent stderr ---\n{}", responses.len(), h.agent.stderr());
        };
        if is_response(&message) {
            let id = message["id"].as_i64().unwrap();
            assert!(prompts.contains_key(&id), "a response to an id we did not send: {message}");
            responses.entry(id).or_default().push(message.clone());
        }
        messages.push(message);
    }
    // Nothing more: in particular no second response to any prompt.
    let stray = h.agent.barrier().await;
    assert!(stray.is_empty(), "stray messages after every prompt was answered: {stray:?}");

    let requests = h.mock.requests();
    assert_eq!(requests.len(), SESSIONS);
    let mut texts = HashSet::new();
    for (s, session) in sessions.iter().enumerate() {
        let k = requests.iter().position(|r| last_user_text(&r.body) == format!("question-{s}")).unwrap();
        let own: Vec<Value> =
            messages.iter().filter(|m| m["params"]["sessionId"] == session.as_str()).cloned().collect();
        let text = agent_text(&own);
        assert_eq!(text, format!("answer-{k}"), "session {s} got request {k}'s answer");
        texts.insert(text);
        let (id, _) = prompts.iter().find(|(_, p)| *p == session).unwrap();
        let answers = &responses[id];
        assert_eq!(answers.len(), 1, "exactly one response for session {s}");
        assert_eq!(answers[0]["result"]["stopReason"], "end_turn", "{}", answers[0]);
    }
    assert_eq!(texts.len(), SESSIONS, "all answers are distinct");
    h.agent.assert_stdout_is_only_jsonrpc();
}

/// A cancel sent as the last chunk is on its way, many times over, with the
/// gap between the first and last chunk swept across the race window: each
/// prompt gets exactly one response, `end_turn` or `cancelled` and never an
/// error, and nothing of a turn arrives after its response.
#[tokio::test]
async fn cancel_racing_the_end_of_a_turn_answers_once() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    let mut outcomes: HashMap<String, u32> = HashMap::new();
    let mut earlier_tails: Vec<String> = Vec::new();
    for i in 0..RACES {
        let tail = format!(" tail-{i}.");
        // 0 to ~5 ms between the chunk the test reacts to and the last one.
        h.mock.push(paused_reply(&format!("head-{i}"), Duration::from_micros(i * 100), &tail));
        let id = prompt(&mut h.agent, &session, &format!("race {i}")).await;
        let mut before = Vec::new();
        loop {
            let message = h.agent.next_message(Duration::from_secs(5)).await.expect("the first chunk");
            let first = message["params"]["update"]["sessionUpdate"] == "agent_message_chunk";
            before.push(message);
            if first {
                break;
            }
        }
        h.agent.notify("session/cancel", json!({"sessionId": session})).await;
        let (rest, response) = h.agent.response(id).await;
        before.extend(rest);

        let stop = response["result"]["stopReason"].as_str().unwrap_or_else(|| panic!("race {i}: {response}"));
        assert!(matches!(stop, "end_turn" | "cancelled"), "race {i}: {response}");
        *outcomes.entry(stop.to_owned()).or_default() += 1;
        for message in &before {
            assert!(!is_response(message), "race {i}: a second response: {message}");
            let text = message["params"]["update"]["content"]["text"].as_str().unwrap_or_default();
            assert!(!earlier_tails.iter().any(|t| t == text), "race {i}: output of an earlier turn: {message}");
        }
        let text = agent_text(&before);
        assert!(text == format!("head-{i}{tail}") || text == format!("head-{i}"), "race {i}: {text:?}");
        if stop == "end_turn" {
            assert!(text.ends_with(&tail), "race {i}: an ended turn streamed everything: {text:?}");
        }
        earlier_tails.push(tail);
    }
    let stray = h.agent.barrier().await;
    assert!(stray.is_empty(), "nothing after the last response: {stray:?}");
    // The session still works.
    h.mock.push(paused_reply("after ", Duration::ZERO, "the races"));
    let id = prompt(&mut h.agent, &session, "still there?").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(agent_text(&before), "after the races");
    eprintln!("race outcomes: {outcomes:?}");
}
