//! Interoperability: the official ACP SDK (`agent-client-protocol` 5.2.0,
//! Client side) drives the real `lathe` binary over stdio, against the mock
//! model server. Code no one here wrote checks that our wire shapes, ordering
//! and cancellation are what a real client expects.
//!
//! How the SDK is used (5.2.0's builder API; it churns, so it is pinned):
//! * [`AcpAgent`] (feature `process`) spawns the agent command and is the
//!   transport. It cannot clear inherited variables, so the command is
//!   `/usr/bin/env -u LATHE_… -u OPENAI_… lathe --config …`, which mirrors
//!   the scripted client's environment (`support::acp_client`). Its
//!   `with_debug` tap records every stdin/stdout/stderr line, quoted when an
//!   assertion fails.
//! * `Client.v1()` builds the client: `on_receive_notification` collects
//!   `SessionNotification`s, `on_receive_request` answers
//!   `session/request_permission` with the first allow option, and
//!   `connect_with(agent, foreground)` runs the test body as the foreground.
//!   When the foreground returns the SDK closes lathe's stdin and waits for it
//!   to exit; a nonzero exit makes `connect_with` fail.
//! * In the foreground, `cx.send_request(..).block_task()` sends a typed
//!   request and awaits its typed response; `cx.send_notification(..)` sends
//!   `session/cancel`.
//!
//! Ordering: the SDK's dispatch loop runs handlers one message at a time, in
//! arrival order, so when `block_task()` returns the prompt's response, every
//! `session/update` lathe wrote before that response has already been handed
//! to the notification handler (and so sits in our channel).
//!
//! This is a package of its own (see its Cargo.toml: the SDK pins an older
//! schema crate than lathe's), so it links no lathe code: the binary comes
//! from `LATHE_BIN` (the root's `tests/suite/official_client.rs` sets it),
//! and the support modules it shares with the main suites are included by
//! path.

#![cfg(test)]
// Test code: a panic with a message is the right way to fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The pieces of the main suites' support code this package uses (at the
// crate root, as `mock_openai` finds `clock` at `super::clock`).
#[path = "../support/agent_env.rs"]
mod agent_env;
#[path = "../support/clock.rs"]
#[allow(dead_code)]
mod clock;
#[path = "../support/mock_openai.rs"]
#[allow(dead_code)]
mod mock_openai;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, InitializeRequest, NewSessionRequest, PermissionOptionKind, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionId, SessionNotification, SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, Client, LineDirection};
use pretty_assertions::assert_eq;
use tokio::sync::mpsc;

use crate::agent_env::{environment, scrubbed, write_config};
use crate::mock_openai::{MockOpenAi, Reply, Step, ev_finish, ev_reasoning, ev_role, ev_text, ev_usage};

/// Bound on each request/response round trip.
const STEP: Duration = Duration::from_secs(5);
/// Bound on a whole test, process start-up and shutdown included.
const WHOLE: Duration = Duration::from_secs(20);

/// The lathe binary under test: `LATHE_BIN`, an absolute path.
fn lathe_binary() -> PathBuf {
    let path = std::env::var_os("LATHE_BIN")
        .map(PathBuf::from)
        .expect("LATHE_BIN names the lathe binary to test (the root's `cargo test` sets it)");
    assert!(path.is_absolute() && path.is_file(), "LATHE_BIN is not an absolute path to a file: {path:?}");
    path
}

/// Every line that crossed lathe's stdio, tagged with its direction.
#[derive(Clone, Default)]
struct Transcript(Arc<Mutex<Vec<String>>>);

impl Transcript {
    fn push(&self, line: &str, direction: LineDirection) {
        let tag = match direction {
            LineDirection::Stdin => "client →",
            LineDirection::Stdout => "agent  ←",
            LineDirection::Stderr => "stderr  ",
        };
        self.lock().push(format!("{tag} {line}"));
    }

    fn lock(&self) -> MutexGuard<'_, Vec<String>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The transcript, for a failure message.
    fn dump(&self) -> String {
        format!("\n--- lathe stdio transcript ---\n{}", self.lock().join("\n"))
    }
}

/// The `lathe` binary as an SDK transport: `--config` pointing at `base_url`,
/// in the agent environment the scripted client uses
/// ([`crate::agent_env::environment`]: `LATHE_*`/`OPENAI_*`
/// removed, `HOME` and the XDG directories in `home`, loopback exempt from
/// proxies), every line recorded in `transcript`.
fn lathe_agent(home: &Path, base_url: &str, transcript: &Transcript) -> AcpAgent {
    let config = write_config(home, base_url, "");
    let mut command = AcpAgentConfig::new("/usr/bin/env");
    for (name, _) in std::env::vars_os() {
        // A name that is not UTF-8 cannot be passed on (and cannot be ours).
        if let Some(name) = name.to_str()
            && scrubbed(name)
        {
            command = command.arg("-u").arg(name);
        }
    }
    let command = command
        .arg(lathe_binary().to_str().expect("the binary's path is UTF-8"))
        .arg("--config")
        .arg(config.to_str().expect("temp paths are UTF-8"))
        .envs(environment(home, &[]));
    let transcript = transcript.clone();
    AcpAgent::new(command).with_debug(move |line, direction| transcript.push(line, direction))
}

/// Runs `foreground` as an SDK client of `agent`. Every `session/update` is
/// forwarded to `updates`; permission requests are granted with the first
/// allow option. Fails the test if the connection (including lathe's exit
/// after stdin closes) does not finish cleanly within [`WHOLE`].
async fn run_client<R>(
    agent: AcpAgent,
    updates: mpsc::UnboundedSender<SessionNotification>,
    transcript: &Transcript,
    foreground: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<R, agent_client_protocol::Error>,
) -> R {
    let connection = Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                // The foreground may have stopped listening; that is fine.
                let _ = updates.send(notification);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _cx| {
                let allow = request.options.iter().find(|option| {
                    matches!(option.kind, PermissionOptionKind::AllowOnce | PermissionOptionKind::AllowAlways)
                });
                let outcome = match allow {
                    Some(option) => {
                        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(option.option_id.clone()))
                    }
                    None => RequestPermissionOutcome::Cancelled,
                };
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(agent, foreground);
    match tokio::time::timeout(WHOLE, connection).await {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => panic!("the SDK connection to lathe failed: {error:?}{}", transcript.dump()),
        Err(_) => panic!("the SDK connection to lathe did not finish within {WHOLE:?}{}", transcript.dump()),
    }
}

/// Awaits `response` for at most `bound`, panicking with the transcript if it
/// does not come or is an error.
async fn within<T>(
    what: &str,
    bound: Duration,
    transcript: &Transcript,
    response: impl Future<Output = Result<T, agent_client_protocol::Error>>,
) -> T {
    match tokio::time::timeout(bound, response).await {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => panic!("{what} failed: {error:?}{}", transcript.dump()),
        Err(_) => panic!("no answer to {what} within {bound:?}{}", transcript.dump()),
    }
}

/// `initialize` (protocol version 1) and `session/new` for `cwd`; checks the
/// agent's answers and returns the session id.
async fn handshake(cx: &ConnectionTo<Agent>, cwd: &Path, transcript: &Transcript) -> SessionId {
    let init = within(
        "initialize",
        STEP,
        transcript,
        cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task(),
    )
    .await;
    assert_eq!(init.protocol_version, ProtocolVersion::V1, "negotiated protocol version{}", transcript.dump());
    let info = init.agent_info.unwrap_or_else(|| panic!("initialize: no agentInfo{}", transcript.dump()));
    assert_eq!(info.name, "lathe");

    assert!(cwd.is_absolute(), "session/new needs an absolute cwd, got {cwd:?}");
    let session =
        within("session/new", STEP, transcript, cx.send_request(NewSessionRequest::new(cwd)).block_task()).await;
    assert!(!session.session_id.0.is_empty(), "session/new returned an empty session id{}", transcript.dump());
    session.session_id
}

fn text_prompt(session_id: &SessionId, text: &str) -> PromptRequest {
    PromptRequest::new(session_id.clone(), vec![ContentBlock::Text(TextContent::new(text))])
}

/// Everything already in `updates`, without waiting.
fn drain(updates: &mut mpsc::UnboundedReceiver<SessionNotification>) -> Vec<SessionNotification> {
    std::iter::from_fn(|| updates.try_recv().ok()).collect()
}

/// The concatenated text of the text chunks that `pick` selects.
fn chunk_text(updates: &[SessionNotification], pick: fn(&SessionUpdate) -> Option<&ContentBlock>) -> String {
    updates
        .iter()
        .filter_map(|n| pick(&n.update))
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect()
}

fn message_chunk(update: &SessionUpdate) -> Option<&ContentBlock> {
    match update {
        SessionUpdate::AgentMessageChunk(chunk) => Some(&chunk.content),
        _ => None,
    }
}

fn thought_chunk(update: &SessionUpdate) -> Option<&ContentBlock> {
    match update {
        SessionUpdate::AgentThoughtChunk(chunk) => Some(&chunk.content),
        _ => None,
    }
}

/// What the foreground of [`a_prompt_turn_streams_thoughts_text_and_usage`] saw.
struct TurnSeen {
    session_id: SessionId,
    stop_reason: StopReason,
    /// Updates received before the prompt's response resolved.
    before_response: Vec<SessionNotification>,
    /// Updates received after it, up to the answer of a later request.
    after_response: Vec<SessionNotification>,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_turn_streams_thoughts_text_and_usage() {
    let mock = MockOpenAi::start().await;
    mock.push(Reply::Sse(vec![
        ev_role(),
        ev_reasoning("The user wants a greeting."),
        ev_text("Hel"),
        ev_text("lo"),
        ev_finish("stop"),
        ev_usage(5, 2),
        Step::Done,
    ]));
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().join("project");
    std::fs::create_dir(&cwd).unwrap();
    let transcript = Transcript::default();
    let agent = lathe_agent(home.path(), &mock.base_url(), &transcript);
    let (sender, mut updates) = mpsc::unbounded_channel();

    let seen = run_client(agent, sender, &transcript, async |cx| {
        let session_id = handshake(&cx, &cwd, &transcript).await;
        // Whatever lathe announced for the new session is not part of the turn.
        drain(&mut updates);

        let prompt = cx.send_request(text_prompt(&session_id, "Say hello")).block_task();
        let response = within("session/prompt", STEP, &transcript, prompt).await;
        let before_response = drain(&mut updates);
        // A request lathe answers where it reads it: its answer follows
        // anything lathe wrote before it, and the SDK hands notifications
        // over in arrival order, so a trailing update would be here now.
        let barrier = cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task();
        within("a second initialize", STEP, &transcript, barrier).await;
        let after_response = drain(&mut updates);
        Ok(TurnSeen { session_id, stop_reason: response.stop_reason, before_response, after_response })
    })
    .await;

    let dump = transcript.dump();
    assert_eq!(seen.stop_reason, StopReason::EndTurn, "{dump}");
    assert!(
        seen.after_response.is_empty(),
        "session/update(s) arrived after the prompt's response: {:?}{dump}",
        seen.after_response
    );
    let updates = &seen.before_response;
    assert!(
        updates.iter().all(|n| n.session_id == seen.session_id),
        "an update named another session (expected {}){dump}",
        seen.session_id
    );
    assert_eq!(chunk_text(updates, message_chunk), "Hello", "agent_message_chunk texts{dump}");
    assert!(
        updates.iter().any(|n| matches!(n.update, SessionUpdate::AgentThoughtChunk(_))),
        "no agent_thought_chunk before the response{dump}"
    );
    assert_eq!(chunk_text(updates, thought_chunk), "The user wants a greeting.", "agent_thought_chunk texts{dump}");
    let usage: Vec<u64> = updates
        .iter()
        .filter_map(|n| match &n.update {
            SessionUpdate::UsageUpdate(usage) => Some(usage.used),
            _ => None,
        })
        .collect();
    assert!(usage.contains(&7), "expected a usage_update with used 7 before the response, got {usage:?}{dump}");

    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "model requests{dump}");
    assert!(requests[0].raw_body.contains("Say hello"), "the prompt text reached the model: {}", requests[0].raw_body);
}

/// What the foreground of [`cancel_ends_a_stalled_turn_with_cancelled`] saw.
struct CancelSeen {
    stop_reason: StopReason,
    first_chunk: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_ends_a_stalled_turn_with_cancelled() {
    let mock = MockOpenAi::start().await;
    mock.push(Reply::Sse(vec![ev_role(), ev_text("partial"), Step::Stall]));
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().join("project");
    std::fs::create_dir(&cwd).unwrap();
    let transcript = Transcript::default();
    let agent = lathe_agent(home.path(), &mock.base_url(), &transcript);
    let (sender, mut updates) = mpsc::unbounded_channel();

    let seen = run_client(agent, sender, &transcript, async |cx| {
        let session_id = handshake(&cx, &cwd, &transcript).await;
        drain(&mut updates);

        // Sent now; kept pending while we wait for the first chunk. (Dropping
        // it unanswered would send `$/cancel_request` instead.)
        let prompt = cx.send_request(text_prompt(&session_id, "Write a long essay"));
        let first_chunk = tokio::time::timeout(STEP, async {
            loop {
                let Some(notification) = updates.recv().await else {
                    panic!("the update channel closed before the first chunk{}", transcript.dump());
                };
                if let Some(ContentBlock::Text(text)) = message_chunk(&notification.update) {
                    break text.text.clone();
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no agent_message_chunk within {STEP:?}{}", transcript.dump()));

        // The model stalls for ever: an answer at all means the cancel ended
        // the wait (how fast is the benchmark's business).
        cx.send_notification(CancelNotification::new(session_id.clone()))?;
        let response = within("the cancelled session/prompt", STEP, &transcript, prompt.block_task()).await;
        // Cancelling must also close the model's HTTP stream.
        mock.wait_for_disconnects(1, STEP).await;
        Ok(CancelSeen { stop_reason: response.stop_reason, first_chunk })
    })
    .await;

    let dump = transcript.dump();
    assert_eq!(seen.first_chunk, "partial", "{dump}");
    assert_eq!(seen.stop_reason, StopReason::Cancelled, "{dump}");
}
