//! Unit tests of [`Turn`] (issue 12 item 2): the turn loop driven directly,
//! with a recording [`EventSink`], a scripted [`Approver`], the local disk in
//! a temporary directory, and the model behind the integration tests' mock
//! OpenAI server (real HTTP and SSE over loopback, [`crate::test_support`]).
//! Every test runs on a paused clock that moves only when a test says so
//! ([`FrozenClock`]): no timeout, back-off or grace period can fire behind a
//! test's back, and a cancellation lands exactly at the await it names,
//! because a seam (the sink, the approver, the host, the external tools) or
//! the mock's own record triggers it.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::*;
use crate::config::Config;
use crate::permission::{ApprovalError, Mode};
use crate::platform::authority::Target;
use crate::test_support::clock::{self, FrozenClock};
use crate::test_support::mock_openai::{
    self, MockOpenAi, Reply, Step, ev_finish, ev_role, ev_text, ev_tool_call_args, ev_tool_call_start, ev_usage,
    text_reply, tool_call_reply, tool_result,
};
use crate::tools::local::LocalHost;
use crate::tools::{HostError, Terminals};

/// A bound on the tests' own waits (a hang detector, in real time).
const WAIT: Duration = Duration::from_secs(10);

/// A tool-less history message of about `bytes` bytes.
fn filler(bytes: usize) -> String {
    "x".repeat(bytes)
}

fn user(text: &str) -> Message {
    Message::User { parts: vec![UserPart::Text { text: text.to_owned() }] }
}

fn assistant(text: &str, tool_calls: Vec<ToolCallRequest>) -> Message {
    Message::Assistant {
        text: text.to_owned(),
        reasoning: String::new(),
        reasoning_field: None,
        reasoning_details: None,
        tool_calls,
        interrupted: false,
    }
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCallRequest {
    ToolCallRequest { id: id.to_owned(), name: name.to_owned(), arguments: arguments.to_string() }
}

fn tool(id: &str, content: &str) -> Message {
    Message::Tool { tool_call_id: id.to_owned(), content: content.to_owned() }
}

fn prompt(text: &str) -> Vec<UserPart> {
    vec![UserPart::Text { text: text.to_owned() }]
}

/// The `messages` of a recorded chat request.
fn sent_messages(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().unwrap()
}

/// The last message of a recorded chat request, as text.
fn last_sent_text(body: &Value) -> String {
    sent_messages(body).last().unwrap()["content"].as_str().unwrap_or_default().to_owned()
}

type Trigger = Box<dyn Fn(&AgentEvent) -> bool + Send + Sync>;

/// Records every event; cancels the turn when an event matches the trigger.
struct Recorder {
    events: Mutex<Vec<AgentEvent>>,
    cancel: CancellationToken,
    cancel_when: Mutex<Option<Trigger>>,
}

impl EventSink for Recorder {
    fn emit(&self, event: AgentEvent) {
        if lock(&self.cancel_when).as_ref().is_some_and(|trigger| trigger(&event)) {
            self.cancel.cancel();
        }
        lock(&self.events).push(event);
    }
}

impl Recorder {
    fn all(&self) -> Vec<AgentEvent> {
        lock(&self.events).clone()
    }

    /// The status updates of call `id`, in order.
    fn statuses(&self, id: &str) -> Vec<ToolCallStatus> {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::ToolCallUpdated { id: updated, change } if updated == id => change.status,
                _ => None,
            })
            .collect()
    }

    /// The ids of the calls that started, in order.
    fn started(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::ToolCallStarted { id, .. } => Some(id),
                _ => None,
            })
            .collect()
    }

    fn usage(&self) -> Vec<(u64, u64, bool)> {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::Usage { used, size, estimated, .. } => Some((used, size, estimated)),
                _ => None,
            })
            .collect()
    }

    fn thoughts(&self) -> Vec<String> {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::AgentThought { text, .. } => Some(text),
                _ => None,
            })
            .collect()
    }

    fn text(&self) -> String {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                AgentEvent::AgentText { text, .. } => Some(text),
                _ => None,
            })
            .collect()
    }
}

/// What the scripted user does when asked.
enum Reaction {
    Answer(Answer),
    /// The editor could not ask.
    Fail(&'static str),
    /// The user cancels the turn instead of answering.
    Cancel,
}

/// Answers permission questions from a script, recording each question.
struct Scripted {
    script: Mutex<VecDeque<Reaction>>,
    asked: Mutex<Vec<PermissionQuestion>>,
    cancel: CancellationToken,
}

impl Approver for Scripted {
    fn ask<'a>(&'a self, question: &'a PermissionQuestion) -> BoxFuture<'a, Result<Answer, ApprovalError>> {
        lock(&self.asked).push(question.clone());
        let reaction = lock(&self.script).pop_front();
        Box::pin(async move {
            match reaction {
                Some(Reaction::Answer(answer)) => Ok(answer),
                Some(Reaction::Fail(why)) => Err(ApprovalError(why.to_owned())),
                Some(Reaction::Cancel) => {
                    self.cancel.cancel();
                    std::future::pending().await
                }
                None => panic!("asked about {} with no answer scripted", question.title),
            }
        })
    }
}

/// The local disk, except that reading a file is where the user cancels:
/// the read never finishes.
struct CancelDuringRead {
    cancel: CancellationToken,
}

impl Host for CancelDuringRead {
    fn read_text_file<'a>(&'a self, _: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
        self.cancel.cancel();
        Box::pin(std::future::pending())
    }
    fn write_text_file<'a>(&'a self, target: &'a Target, content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        LocalHost.write_text_file(target, content)
    }
    fn reads_via_client(&self) -> bool {
        false
    }
    fn writes_in_place(&self) -> bool {
        false
    }
    fn terminals(&self) -> Option<&dyn Terminals> {
        None
    }
}

/// External tools (an MCP server) still starting: settling waits until the
/// turn is cancelled, and none are offered beyond the built-ins.
#[derive(Debug)]
struct StillStarting {
    settling: tokio::sync::Notify,
}

impl ExternalTools for StillStarting {
    fn settle<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.settling.notify_one();
            cancel.cancelled().await;
            Vec::new()
        })
    }
    fn definitions(&self) -> Arc<[ToolDefinition]> {
        Arc::from(tools::definitions_with(false))
    }
    fn pending(&self, _: &str) -> Option<(String, ToolKind)> {
        None
    }
    fn prepare(&self, _: &str, _: &str) -> Option<Result<ExternalCall, String>> {
        None
    }
    fn run<'a>(&'a self, _: ExternalCall, _: &'a ToolContext<'a>) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async { ToolOutcome::failed("no external tools") })
    }
}

/// One turn's surroundings: the mock model, a project directory, the seams.
struct Fixture {
    mock: MockOpenAi,
    client: ModelClient,
    config: Config,
    _dir: tempfile::TempDir,
    roots: Vec<PathBuf>,
    events: Recorder,
    approver: Scripted,
    host: Box<dyn Host>,
    external: Option<StillStarting>,
    policy: Mutex<Policy>,
    limits: ToolLimits,
    seen: tools::versions::FileVersions,
    cancel: CancellationToken,
    tools: &'static [ToolDefinition],
    agents: crate::agents::Agents,
    clock: FrozenClock,
}

impl Fixture {
    /// The mock model with a 32k window, the built-in tools, ask mode.
    async fn new() -> Fixture {
        Fixture::with_model("context_window = 32768\n").await
    }

    /// `model_toml` completes the model's table (its window, its limits).
    async fn with_model(model_toml: &str) -> Fixture {
        let clock = FrozenClock::hold().await;
        let mock = MockOpenAi::start().await;
        let text = format!(
            "default_model = \"mock\"\n[models.mock]\nbase_url = \"{}\"\nmodel = \"mock-model\"\n{model_toml}",
            mock.base_url()
        );
        let config = Config::from_toml_str(&text, Path::new("test.toml"), &|_| None).unwrap();
        let client = ModelClient::new(Arc::new(config.default_model().unwrap().clone()), &config.network).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        let cancel = CancellationToken::new();
        Fixture {
            mock,
            client,
            config,
            roots: vec![cwd],
            _dir: dir,
            events: Recorder { events: Mutex::default(), cancel: cancel.clone(), cancel_when: Mutex::default() },
            approver: Scripted { script: Mutex::default(), asked: Mutex::default(), cancel: cancel.clone() },
            host: Box::new(LocalHost),
            external: None,
            policy: Mutex::new(Policy::new(Mode::Ask)),
            limits: ToolLimits::default(),
            seen: tools::versions::FileVersions::default(),
            cancel,
            tools: tools::definitions_with(false),
            agents: crate::agents::Agents::builtin(),
            clock,
        }
    }

    fn cwd(&self) -> &Path {
        &self.roots[0]
    }

    fn answer(&self, reactions: impl IntoIterator<Item = Reaction>) {
        lock(&self.approver.script).extend(reactions);
    }

    fn cancel_when(&self, trigger: impl Fn(&AgentEvent) -> bool + Send + Sync + 'static) {
        *lock(&self.events.cancel_when) = Some(Box::new(trigger));
    }

    fn turn(&self) -> Turn<'_> {
        Turn {
            client: &self.client,
            settings: &self.config.agent,
            events: &self.events,
            cancel: &self.cancel,
            workspace: Workspace {
                cwd: self.cwd(),
                roots: &self.roots,
                host: self.host.as_ref(),
                approver: &self.approver,
                policy: &self.policy,
                limits: &self.limits,
                seen: &self.seen,
            },
            tools: self.tools,
            external: self.external.as_ref().map(|external| external as &dyn ExternalTools),
            context: &self.config.context,
            steers: None,
            agents: &self.agents,
            rules: None,
            hooks: None,
        }
    }

    /// Runs one turn on `conversation`.
    async fn run(&self, conversation: &mut Conversation, text: &str) -> Result<StopReason, TurnError> {
        clock::within(WAIT, self.turn().run(conversation, prompt(text))).await.expect("the turn ends")
    }

    /// Runs one turn on `conversation`, cancelling it once the mock has
    /// received `path` (with a request body, when `chat`).
    async fn run_cancelled_at_request(&self, conversation: &mut Conversation, path: &str) -> StopReason {
        let cancel_there = async {
            clock::poll_until("the request reaches the mock", WAIT, || {
                self.mock.requests().iter().any(|request| request.path == path)
            })
            .await;
            self.cancel.cancel();
        };
        let (ended, ()) = tokio::join!(self.run(conversation, "go"), cancel_there);
        ended.unwrap()
    }
}

/// An answer that ends with `finish_reason`, with one call and usage.
fn ending_with(finish_reason: &str, calls: &[(&str, &str, Value)]) -> Reply {
    let mut steps = vec![ev_role(), ev_text("Here goes.")];
    for (index, (id, name, args)) in calls.iter().enumerate() {
        let index = u32::try_from(index).unwrap();
        steps.push(ev_tool_call_start(index, id, name));
        steps.push(ev_tool_call_args(index, &args.to_string()));
    }
    steps.extend([ev_finish(finish_reason), ev_usage(10, 10), Step::Done]);
    Reply::Sse(steps)
}

// ---------------------------------------------------------------------------
// The tool loop
// ---------------------------------------------------------------------------

/// A call runs, its result goes back to the model, and the model's next
/// answer ends the turn; the user sees the call start, run and complete.
#[tokio::test(start_paused = true)]
async fn a_tool_result_goes_back_to_the_model_until_it_answers() {
    let f = Fixture::new().await;
    std::fs::write(f.cwd().join("notes.txt"), "the answer is 42\n").unwrap();
    f.mock.push(tool_call_reply(&[("call_a", "read_file", json!({"path": "notes.txt"}))]));
    f.mock.push(text_reply("It says 42."));
    let mut conversation = Conversation::default();

    let stop = f.run(&mut conversation, "what do my notes say?").await.unwrap();

    assert_eq!(stop, StopReason::EndTurn);
    let requests = f.mock.chat_requests();
    assert_eq!(requests.len(), 2);
    let result = tool_result(&requests[1].body, "call_a");
    assert!(result.contains("the answer is 42"), "{result}");
    assert_eq!(f.events.started(), ["call_a"]);
    assert_eq!(
        f.events.statuses("call_a"),
        [ToolCallStatus::InProgress, ToolCallStatus::Completed],
        "{:#?}",
        f.events.all()
    );
    assert_eq!(f.events.text(), "It says 42.");
    let messages = conversation.messages();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    assert!(matches!(&messages[1], Message::Assistant { tool_calls, .. } if tool_calls[0].id == "call_a"));
    assert!(
        matches!(&messages[2], Message::Tool { tool_call_id, content } if tool_call_id == "call_a" && *content == result)
    );
    assert_eq!(messages[3], assistant("It says 42.", Vec::new()));
    assert!(f.approver.asked.lock().unwrap().is_empty(), "a read inside the project is not asked about");
}

/// In ask mode a write is asked about: a rejection is told to the model and
/// nothing is written; an approval runs it. An approver that fails (the
/// editor could not ask) does not run the call either.
#[tokio::test(start_paused = true)]
async fn writes_are_asked_about_and_the_answer_is_obeyed() {
    let f = Fixture::new().await;
    f.mock.push(tool_call_reply(&[
        ("call_no", "write_file", json!({"path": "no.txt", "content": "no\n"})),
        ("call_yes", "write_file", json!({"path": "yes.txt", "content": "yes\n"})),
        ("call_broken", "write_file", json!({"path": "broken.txt", "content": "broken\n"})),
    ]));
    f.mock.push(text_reply("Done."));
    f.answer([Reaction::Answer(Answer::RejectOnce), Reaction::Answer(Answer::AllowOnce), Reaction::Fail("gone")]);
    let mut conversation = Conversation::default();

    let stop = f.run(&mut conversation, "write them").await.unwrap();

    assert_eq!(stop, StopReason::EndTurn);
    let asked: Vec<String> = f.approver.asked.lock().unwrap().iter().map(|q| q.call_id.clone()).collect();
    assert_eq!(asked, ["call_no", "call_yes", "call_broken"]);
    assert!(f.approver.asked.lock().unwrap().iter().all(|q| q.kind == ToolKind::Edit && !q.choices.is_empty()));
    assert!(!f.cwd().join("no.txt").exists());
    assert_eq!(std::fs::read_to_string(f.cwd().join("yes.txt")).unwrap(), "yes\n");
    assert!(!f.cwd().join("broken.txt").exists());
    let body = &f.mock.chat_requests()[1].body;
    assert!(tool_result(body, "call_no").starts_with("The user declined this tool call."));
    assert_eq!(tool_result(body, "call_yes"), "Created yes.txt (1 line).");
    assert!(tool_result(body, "call_broken").contains("could not ask the user for permission (gone)"));
    assert_eq!(f.events.statuses("call_no"), [ToolCallStatus::Failed]);
    assert_eq!(f.events.statuses("call_yes"), [ToolCallStatus::InProgress, ToolCallStatus::Completed]);
    assert_eq!(f.events.statuses("call_broken"), [ToolCallStatus::Failed]);
}

/// A call the model gets wrong (no such tool, arguments that are not JSON)
/// fails with a message the model can act on, and the turn goes on.
#[tokio::test(start_paused = true)]
async fn a_call_the_model_got_wrong_is_explained_to_it() {
    let f = Fixture::new().await;
    let mut steps = vec![ev_role(), ev_tool_call_start(0, "call_x", "teleport"), ev_tool_call_args(0, "{}")];
    steps.extend([ev_tool_call_start(1, "call_y", "read_file"), ev_tool_call_args(1, "{not json")]);
    steps.extend([ev_finish("tool_calls"), Step::Done]);
    f.mock.push(Reply::Sse(steps));
    f.mock.push(text_reply("Sorry."));
    let mut conversation = Conversation::default();

    assert_eq!(f.run(&mut conversation, "go").await.unwrap(), StopReason::EndTurn);

    let body = &f.mock.chat_requests()[1].body;
    assert!(tool_result(body, "call_x").starts_with("There is no tool named \"teleport\". Available tools: "));
    assert!(tool_result(body, "call_y").contains("are not valid JSON"), "{}", tool_result(body, "call_y"));
    assert_eq!(f.events.statuses("call_x"), [ToolCallStatus::Failed]);
    assert_eq!(f.events.statuses("call_y"), [ToolCallStatus::Failed]);
}

/// Ids a server reuses across responses are made unique within the session
/// (ACP wants them unique), and the model hears back the id it was shown.
#[tokio::test(start_paused = true)]
async fn a_reused_call_id_is_made_unique() {
    let f = Fixture::new().await;
    f.mock.push(tool_call_reply(&[("call_0", "list_directory", json!({"path": "."}))]));
    f.mock.push(tool_call_reply(&[("call_0", "list_directory", json!({"path": "."}))]));
    f.mock.push(text_reply("Empty."));
    let mut conversation = Conversation::default();

    assert_eq!(f.run(&mut conversation, "look twice").await.unwrap(), StopReason::EndTurn);

    assert_eq!(f.events.started(), ["call_0", "call_0_2"]);
    let body = &f.mock.chat_requests()[2].body;
    tool_result(body, "call_0");
    tool_result(body, "call_0_2");
}

/// The turn stops after `max_model_requests_per_turn` requests, with every
/// call of the last answer answered so the history stays valid.
#[tokio::test(start_paused = true)]
async fn a_turn_stops_at_its_request_limit() {
    let mut f = Fixture::new().await;
    f.config.agent.max_model_requests_per_turn = 2;
    for id in ["call_1", "call_2"] {
        f.mock.push(tool_call_reply(&[(id, "list_directory", json!({"path": "."}))]));
    }
    let mut conversation = Conversation::default();

    let stop = f.run(&mut conversation, "keep going").await.unwrap();

    assert_eq!(stop, StopReason::MaxTurnRequests);
    assert_eq!(f.mock.chat_requests().len(), 2, "no third request");
    assert!(
        matches!(conversation.messages().last(), Some(Message::Tool { tool_call_id, .. }) if tool_call_id == "call_2")
    );
}

/// ACP: after a refusal, the prompt and everything after it are left out of
/// the next request; a call in the refused answer is not run.
#[tokio::test(start_paused = true)]
async fn a_refusal_drops_the_prompt_from_the_history() {
    let f = Fixture::new().await;
    let mut conversation = Conversation::default();
    conversation.push(user("earlier"));
    conversation.push(assistant("earlier answer", Vec::new()));
    let before = conversation.messages().to_vec();
    f.mock.push(ending_with("content_filter", &[("call_r", "write_file", json!({"path": "r.txt", "content": "r"}))]));

    let stop = f.run(&mut conversation, "something refused").await.unwrap();

    assert_eq!(stop, StopReason::Refusal);
    assert_eq!(conversation.messages(), before);
    assert!(!f.cwd().join("r.txt").exists());
    assert_eq!(f.events.statuses("call_r"), [ToolCallStatus::Failed]);
    assert!(f.approver.asked.lock().unwrap().is_empty());

    // The model's own refusal (OpenAI's `refusal` delta) with a plain stop.
    let refusal = mock_openai::chunk(json!({"refusal": "I can't help with that."}), None);
    f.mock.push(Reply::Sse(vec![ev_role(), Step::Event(refusal), ev_finish("stop"), Step::Done]));
    let stop = f.run(&mut conversation, "something else refused").await.unwrap();
    assert_eq!(stop, StopReason::Refusal);
    assert_eq!(conversation.messages(), before);
    assert!(f.events.text().ends_with("I can't help with that."), "the user sees why");
}

/// An answer cut at the output-token limit stops the turn; its calls are
/// not run (their arguments may be cut too) but get a result the model reads.
#[tokio::test(start_paused = true)]
async fn the_output_limit_stops_the_turn_without_running_calls() {
    let f = Fixture::new().await;
    f.mock.push(ending_with("length", &[("call_l", "write_file", json!({"path": "l.txt", "content": "l"}))]));
    let mut conversation = Conversation::default();

    let stop = f.run(&mut conversation, "write a lot").await.unwrap();

    assert_eq!(stop, StopReason::MaxTokens);
    assert!(!f.cwd().join("l.txt").exists());
    assert_eq!(f.events.statuses("call_l"), [ToolCallStatus::Failed]);
    assert_eq!(
        conversation.messages().last(),
        Some(&tool("call_l", "Not run: the response hit the output-token limit."))
    );
}

// ---------------------------------------------------------------------------
// Token estimates
// ---------------------------------------------------------------------------

/// The server's usage is what the user sees and what the next estimate
/// starts from; the turn's total sums its requests.
#[tokio::test(start_paused = true)]
async fn reported_usage_is_shown_and_summed() {
    let f = Fixture::new().await;
    f.mock.push(tool_call_reply(&[("call_u", "list_directory", json!({"path": "."}))]));
    f.mock.push(text_reply("ok"));
    let mut conversation = Conversation::default();

    f.run(&mut conversation, "go").await.unwrap();

    // tool_call_reply reports 10 + 10 tokens, text_reply 10 + its length.
    assert_eq!(f.events.usage(), [(20, 32768, false), (12, 32768, false)]);
    let total = conversation.turn_usage.unwrap();
    assert_eq!((total.input_tokens, total.output_tokens), (20, 12));
    assert_eq!(conversation.usage_mark, Some(UsageMark { tokens: 12, messages: 4 }));
}

/// Without usage from the server the figure is lathe's estimate, marked as
/// such, and it grows with the conversation.
#[tokio::test(start_paused = true)]
async fn missing_usage_is_estimated() {
    let f = Fixture::new().await;
    let long = filler(4000);
    f.mock.push(Reply::Sse(vec![ev_role(), ev_text("short"), ev_finish("stop"), Step::Done]));
    f.mock.push(Reply::Sse(vec![ev_role(), ev_text(&long), ev_finish("stop"), Step::Done]));
    let mut conversation = Conversation::default();

    f.run(&mut conversation, "first").await.unwrap();
    f.run(&mut conversation, "second").await.unwrap();

    let usage = f.events.usage();
    assert_eq!(usage.len(), 2);
    assert!(usage.iter().all(|&(_, size, estimated)| estimated && size == 32768), "{usage:?}");
    // The first: the whole request (no system prompt here, the tools in the
    // model's profile, the prompt) and the answer.
    let request = Conversation::new(SystemPrompt::default(), vec![user("first")], None);
    let offered = tools::for_profile(f.tools, f.client.profile());
    assert!(!offered.is_empty());
    assert_eq!(usage[0].0, estimate_tokens(&request, "", &offered) + estimate_text_tokens("short"));
    // The second: the first figure, the new prompt and the new answer.
    assert_eq!(usage[1].0, usage[0].0 + estimate_message_tokens(&user("second")) + estimate_text_tokens(&long));
    assert_eq!(conversation.usage_mark, Some(UsageMark { tokens: usage[1].0, messages: 4 }));
}

#[test]
fn estimates_count_about_four_bytes_a_token() {
    assert_eq!(estimate_text_tokens(""), 1);
    assert_eq!(estimate_text_tokens(&filler(400)), 101);
    // Framing costs every message a few tokens; an image about a thousand.
    assert_eq!(estimate_message_tokens(&user(&filler(400))), 104);
    let image =
        Message::User { parts: vec![UserPart::Image { mime_type: "image/png".to_owned(), data: filler(1_000_000) }] };
    assert_eq!(estimate_message_tokens(&image), 1004);
    let with_call = assistant("", vec![call("id", "read_file", json!({"path": "a"}))]);
    assert_eq!(estimate_message_tokens(&with_call), (2 + 9 + 12) / 4 + 4);
    assert_eq!(estimate_message_tokens(&tool("id", &filler(398))), 104);
}

#[test]
fn an_estimate_starts_from_the_last_exact_figure() {
    let mut conversation = Conversation::new(SystemPrompt::from(filler(400).as_str()), Vec::new(), None);
    conversation.push(user(&filler(400)));
    let tools = tools::definitions_with(false);
    let tools_tokens = (serde_json::to_vec(tools).unwrap().len() / 4) as u64;
    assert_eq!(estimate_tokens(&conversation, &filler(400), tools), 101 + tools_tokens + 104);

    conversation.usage_mark = Some(UsageMark { tokens: 5000, messages: 1 });
    conversation.push(assistant(&filler(800), Vec::new()));
    assert_eq!(estimate_tokens(&conversation, &filler(400), tools), 5000 + 204, "the mark, plus what came since");

    // A mark past the end (the history was cut) is ignored.
    conversation.usage_mark = Some(UsageMark { tokens: 5000, messages: 9 });
    assert_eq!(estimate_tokens(&conversation, "", &[]), 1 + 104 + 204);
}

#[test]
fn trim_middle_keeps_both_ends_on_char_boundaries() {
    assert_eq!(trim_middle("short".to_owned(), 10), "short");
    // Half of 23 bytes falls inside an "é": the head stops before it.
    let trimmed = trim_middle(format!("{}{}", "é".repeat(50), "z".repeat(50)), 23);
    assert!(trimmed.starts_with(&format!("{}\n[... 129 bytes omitted", "é".repeat(5))), "{trimmed}");
    assert!(trimmed.ends_with("zzzzzzzzzz"), "{trimmed}");
    assert!(trimmed.contains("bytes omitted from the middle"), "{trimmed}");
}

// ---------------------------------------------------------------------------
// Compaction
// ---------------------------------------------------------------------------

/// Six history messages of 104 tokens each (user, assistant, ...).
fn long_history() -> Conversation {
    let mut conversation = Conversation::default();
    for turn in 0..3 {
        conversation.push(user(&format!("question {turn} {}", filler(400 - 11))));
        conversation.push(assistant(&format!("answer {turn} {}", filler(400 - 9)), Vec::new()));
    }
    conversation
}

/// A fixture with a 1000-token window, compacting at half of it, and no
/// tools (so the history alone decides).
async fn small_window() -> Fixture {
    let mut f = Fixture::with_model("context_window = 1000\n").await;
    f.config.context.compact_threshold = 0.5;
    f.tools = &[];
    f
}

/// Over the threshold, the older history is summarised before the request:
/// the summary request carries that history and the compaction prompt, and
/// the real request the summary and the tail that fits a quarter of the
/// window (the current prompt always included).
#[tokio::test(start_paused = true)]
async fn crossing_the_threshold_summarises_the_older_history() {
    let f = small_window().await;
    let mut conversation = long_history();
    let history = conversation.messages().to_vec();
    f.mock.push(text_reply("SUMMARY: three questions answered."));
    f.mock.push(text_reply("Answer."));

    assert_eq!(f.run(&mut conversation, "next").await.unwrap(), StopReason::EndTurn);

    let requests = f.mock.chat_requests();
    assert_eq!(requests.len(), 2);
    // 624 tokens of history > 500: everything but the last pair and the
    // prompt (109 + 104 <= 250, one more would not fit) is summarised.
    let summary_request = sent_messages(&requests[0].body);
    assert_eq!(summary_request.len(), 1 + 4 + 1, "{summary_request:#?}");
    assert_eq!(summary_request[0]["role"], "system");
    assert!(summary_request[1]["content"].as_str().unwrap().starts_with("question 0"));
    assert_eq!(last_sent_text(&requests[0].body), COMPACT_PROMPT.trim());
    let real = sent_messages(&requests[1].body);
    assert!(real[1]["content"].as_str().unwrap().contains("SUMMARY: three questions answered."), "{real:#?}");
    assert_eq!(real[2]["content"], "Understood. I will continue from this summary.");
    assert!(real[3]["content"].as_str().unwrap().starts_with("question 2"));
    assert_eq!(last_sent_text(&requests[1].body), "next");
    // The compaction is told as it goes: started, the summary as it is
    // written, then how it ended (a front end shows it its own way).
    let compaction: Vec<CompactionEvent> = f
        .events
        .all()
        .into_iter()
        .filter_map(|event| match event {
            AgentEvent::Compaction(event) => Some(event),
            _ => None,
        })
        .collect();
    let Some(CompactionEvent::Started { id }) = compaction.first() else { panic!("{compaction:?}") };
    let streamed: String = compaction
        .iter()
        .filter_map(|event| match event {
            CompactionEvent::Summary { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "SUMMARY: three questions answered.");
    let finished = CompactionEvent::Finished {
        id: Arc::clone(id),
        outcome: CompactionOutcome::Completed("SUMMARY: three questions answered.".to_owned()),
    };
    assert_eq!(compaction.last(), Some(&finished));
    assert_eq!(&conversation.messages()[2..4], &history[4..6]);
    assert_eq!(conversation.messages().len(), 6, "summary, ack, kept pair, prompt, answer");
    assert_eq!(f.events.text(), "Answer.", "the summary is not shown as the answer");
}

/// Under the threshold nothing is summarised.
#[tokio::test(start_paused = true)]
async fn under_the_threshold_nothing_is_summarised() {
    let f = small_window().await;
    let mut conversation = Conversation::default();
    conversation.push(user("small"));
    conversation.push(assistant("talk", Vec::new()));
    f.mock.push(text_reply("Answer."));

    f.run(&mut conversation, "next").await.unwrap();

    assert_eq!(f.mock.chat_requests().len(), 1);
    assert_eq!(conversation.messages().len(), 4);
}

/// A failed summary (an error, or an empty text) leaves the history whole,
/// and the turn goes on with it.
#[tokio::test(start_paused = true)]
async fn a_failed_summary_leaves_the_history_whole() {
    for failure in [Reply::error(400, "no summaries today"), text_reply("   ")] {
        let f = small_window().await;
        let mut conversation = long_history();
        let history = conversation.messages().to_vec();
        f.mock.push(failure);
        f.mock.push(text_reply("Answer."));

        assert_eq!(f.run(&mut conversation, "next").await.unwrap(), StopReason::EndTurn);

        let requests = f.mock.chat_requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(sent_messages(&requests[1].body).len(), 1 + 6 + 1, "system, the whole history, the prompt");
        assert_eq!(&conversation.messages()[..6], &history[..]);
    }
}

#[tokio::test(start_paused = true)]
async fn compaction_outcomes() {
    let f = small_window().await;
    // Nothing before the current turn: nothing to summarise, nothing asked.
    let mut conversation = Conversation::default();
    conversation.push(user("only this"));
    assert!(matches!(f.turn().compact(&mut conversation, Some(0)).await, Compaction::NothingToDo));
    assert!(f.mock.chat_requests().is_empty());

    // `/compact` summarises everything.
    let mut conversation = long_history();
    f.mock.push(text_reply("S"));
    let Compaction::Done { turn_start } = f.turn().compact(&mut conversation, None).await else { panic!() };
    assert_eq!(turn_start, 2);
    assert_eq!(conversation.messages().len(), 2);
    assert_eq!(conversation.messages()[1], assistant("Understood. I will continue from this summary.", Vec::new()));
    assert_eq!(sent_messages(&f.mock.chat_requests()[0].body).len(), 1 + 6 + 1, "system, all six, the ask");

    // An empty summary is a failure that says so.
    let mut conversation = long_history();
    f.mock.push(text_reply(" \n "));
    let outcome = f.turn().compact(&mut conversation, None).await;
    assert!(
        matches!(&outcome, Compaction::Failed(TurnError::Model(ModelError::InvalidResponse(m))) if m.contains("empty")),
        "{outcome:?}"
    );
    assert_eq!(conversation.messages().len(), 6);
}

/// The history ends with the user's message: a blank assistant message keeps
/// the roles alternating in the summary request.
#[tokio::test(start_paused = true)]
async fn a_summary_request_keeps_roles_alternating() {
    let f = small_window().await;
    let mut conversation = Conversation::default();
    conversation.push(user("unanswered"));
    f.mock.push(text_reply("S"));

    assert!(matches!(f.turn().compact(&mut conversation, None).await, Compaction::Done { turn_start: 2 }));

    let roles: Vec<Value> = sent_messages(&f.mock.chat_requests()[0].body).iter().map(|m| m["role"].clone()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
}

#[test]
fn the_split_point_never_separates_a_result_from_its_call() {
    let big = filler(400);
    let messages = vec![
        user(&big),                                              // 0: 104
        assistant("", vec![call("c1", "read_file", json!({}))]), // 1: small
        tool("c1", &big),                                        // 2: ~104
        tool("c2", &big),                                        // 3: ~104
        assistant(&big, Vec::new()),                             // 4: 104
        user("now"),                                             // 5: the turn
    ];
    // Room for the turn and two messages: the split would land on the
    // second result; it moves back to the call.
    assert_eq!(split_point(&messages, 5, 5 + 104 + 105), 1);
    // No room at all: everything before the turn goes.
    assert_eq!(split_point(&messages, 5, 0), 5);
    // Room for everything: nothing goes.
    assert_eq!(split_point(&messages, 5, 10_000), 0);
    // The turn's own messages are kept even when they do not fit.
    assert_eq!(split_point(&messages, 1, 0), 1);
}

// ---------------------------------------------------------------------------
// Transcript repair
// ---------------------------------------------------------------------------

#[test]
fn repair_answers_every_call_and_keeps_what_was_streamed() {
    let mut messages = vec![
        user("go"),
        assistant("", vec![call("c1", "read_file", json!({})), call("c2", "read_file", json!({}))]),
        tool("c1", "done"),
    ];
    repair_transcript(&mut messages, "half an ans".to_owned());
    assert_eq!(messages[3], tool("c2", "The session ended before this tool call finished."));
    let Message::Assistant { text, interrupted, tool_calls, .. } = &messages[4] else { panic!("{messages:?}") };
    assert_eq!((text.as_str(), *interrupted, tool_calls.len()), ("half an ans", true, 0));
    assert_eq!(messages.len(), 5);

    // A prompt with no answer at all gets an (empty) interrupted one.
    let mut messages = vec![user("go")];
    repair_transcript(&mut messages, String::new());
    assert!(matches!(&messages[1], Message::Assistant { text, interrupted: true, .. } if text.is_empty()));

    // A complete transcript is left alone.
    let complete = vec![user("go"), assistant("done", Vec::new())];
    let mut messages = complete.clone();
    repair_transcript(&mut messages, "ignored".to_owned());
    assert_eq!(messages, complete);
}

/// What the user saw of an answer cancelled mid-stream is kept, marked as
/// interrupted, and sent as such with the next prompt; a call the user saw
/// start is closed as failed and never run.
#[tokio::test(start_paused = true)]
async fn an_interrupted_answer_is_kept_and_sent_next_time() {
    let f = Fixture::new().await;
    f.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_text("Let me write"),
        ev_tool_call_start(0, "call_w", "write_file"),
        Step::Stall,
    ]));
    f.mock.push(text_reply("Resumed."));
    f.cancel_when(|event| matches!(event, AgentEvent::ToolCallStarted { .. }));
    let mut conversation = Conversation::default();

    assert_eq!(f.run(&mut conversation, "write it").await.unwrap(), StopReason::Cancelled);

    let Some(Message::Assistant { text, tool_calls, interrupted, .. }) = conversation.messages().last() else {
        panic!("{conversation:?}")
    };
    assert_eq!((text.as_str(), tool_calls.len(), *interrupted), ("Let me write", 0, true));
    assert_eq!(f.events.statuses("call_w"), [ToolCallStatus::Failed]);
    f.mock.wait_for_disconnects(1, WAIT).await;

    let f2_cancel = CancellationToken::new();
    let turn = Turn { cancel: &f2_cancel, ..f.turn() };
    assert_eq!(turn.run(&mut conversation, prompt("go on")).await.unwrap(), StopReason::EndTurn);
    let sent = sent_messages(&f.mock.chat_requests()[1].body).clone();
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(sent[2]["content"], "Let me write\n\n[This response was interrupted by the user.]");
}

/// A stream that breaks off mid-answer fails the turn with the partial
/// answer kept (asking again would repeat what the user saw).
#[tokio::test(start_paused = true)]
async fn a_broken_stream_fails_the_turn_and_keeps_the_partial_answer() {
    let f = Fixture::new().await;
    f.mock.push(Reply::Sse(vec![ev_role(), ev_text("Half"), Step::Delay(Duration::ZERO), Step::Drop]));
    let mut conversation = Conversation::default();

    let error = f.run(&mut conversation, "go").await.unwrap_err();

    assert!(matches!(error, TurnError::Model(ModelError::StreamDropped(_))), "{error:?}");
    assert_eq!(f.mock.chat_requests().len(), 1, "a started answer is not asked for again");
    assert!(
        matches!(conversation.messages().last(), Some(Message::Assistant { text, interrupted: true, .. }) if text == "Half")
    );
}

// ---------------------------------------------------------------------------
// Cancellation at each await
// ---------------------------------------------------------------------------

/// The conversation after a cancel before any answer: the prompt and an
/// empty interrupted answer (roles keep alternating).
fn assert_cancelled_before_an_answer(conversation: &Conversation) {
    let messages = conversation.messages();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert!(matches!(&messages[0], Message::User { .. }));
    assert!(matches!(&messages[1], Message::Assistant { text, interrupted: true, .. } if text.is_empty()));
}

#[tokio::test(start_paused = true)]
async fn cancelled_while_external_tools_settle() {
    let mut f = Fixture::new().await;
    f.external = Some(StillStarting { settling: tokio::sync::Notify::new() });
    let mut conversation = Conversation::default();
    let external = f.external.as_ref().unwrap();
    let cancel_there = async {
        clock::within(WAIT, external.settling.notified()).await.unwrap();
        f.cancel.cancel();
    };

    let (stop, ()) = tokio::join!(f.run(&mut conversation, "go"), cancel_there);

    assert_eq!(stop.unwrap(), StopReason::Cancelled);
    assert!(f.mock.requests().is_empty());
    assert_cancelled_before_an_answer(&conversation);
}

/// The model's window is asked of the server (no `context_window`); the
/// server takes the question and never answers.
#[tokio::test(start_paused = true)]
async fn cancelled_while_the_window_is_asked_for() {
    let f = Fixture::with_model("").await;
    f.mock.route("GET", "/v1/models", Reply::NoAnswer);
    let mut conversation = Conversation::default();

    let stop = f.run_cancelled_at_request(&mut conversation, "/v1/models").await;

    assert_eq!(stop, StopReason::Cancelled);
    assert!(f.mock.chat_requests().is_empty());
    assert_cancelled_before_an_answer(&conversation);
    f.mock.wait_for_disconnects(1, WAIT).await;
}

#[tokio::test(start_paused = true)]
async fn cancelled_while_the_request_opens() {
    let f = Fixture::new().await;
    f.mock.push(Reply::NoAnswer);
    let mut conversation = Conversation::default();

    let stop = f.run_cancelled_at_request(&mut conversation, "/v1/chat/completions").await;

    assert_eq!(stop, StopReason::Cancelled);
    assert_cancelled_before_an_answer(&conversation);
    f.mock.wait_for_disconnects(1, WAIT).await;
}

/// A retryable failure is announced as a thought; the cancel lands in the
/// back-off, which is not waited out (the clock is frozen: it could not be).
#[tokio::test(start_paused = true)]
async fn cancelled_during_a_retry_back_off() {
    let f = Fixture::new().await;
    f.mock.push(Reply::error(503, "busy"));
    f.cancel_when(
        |event| matches!(event, AgentEvent::AgentThought { message_id, .. } if message_id.starts_with("retry_")),
    );
    let mut conversation = Conversation::default();

    assert_eq!(f.run(&mut conversation, "go").await.unwrap(), StopReason::Cancelled);

    assert_eq!(f.mock.chat_requests().len(), 1, "no second attempt");
    assert!(f.events.thoughts()[0].contains("503"), "{:?}", f.events.thoughts());
    assert_cancelled_before_an_answer(&conversation);
}

/// A retryable failure is tried again after the back-off, which the user
/// is told about; the retry's answer is the turn's.
#[tokio::test(start_paused = true)]
async fn a_retry_after_the_back_off_answers() {
    let f = Fixture::new().await;
    f.mock.push(Reply::error(503, "busy"));
    f.mock.push(text_reply("Second time lucky."));
    let mut conversation = Conversation::default();
    let advance_through_back_off = async {
        clock::poll_until("the retry is announced", WAIT, || !f.events.thoughts().is_empty()).await;
        assert_eq!(f.mock.chat_requests().len(), 1, "the back-off is waited");
        f.clock.advance(f.config.network.retry_max_delay).await;
    };

    let (stop, ()) = tokio::join!(f.run(&mut conversation, "go"), advance_through_back_off);

    assert_eq!(stop.unwrap(), StopReason::EndTurn);
    assert_eq!(f.mock.chat_requests().len(), 2);
    assert_eq!(f.events.text(), "Second time lucky.");
}

#[tokio::test(start_paused = true)]
async fn cancelled_while_the_answer_streams() {
    let f = Fixture::new().await;
    f.mock.push(Reply::Sse(vec![ev_role(), ev_text("Partial"), Step::Stall]));
    f.cancel_when(|event| matches!(event, AgentEvent::AgentText { .. }));
    let mut conversation = Conversation::default();

    assert_eq!(f.run(&mut conversation, "go").await.unwrap(), StopReason::Cancelled);

    assert!(
        matches!(conversation.messages().last(), Some(Message::Assistant { text, interrupted: true, .. }) if text == "Partial")
    );
    f.mock.wait_for_disconnects(1, WAIT).await;
}

/// The user cancels instead of answering a permission question: that call
/// and the ones after it get a "cancelled" result, none runs.
#[tokio::test(start_paused = true)]
async fn cancelled_while_asking_permission() {
    let f = Fixture::new().await;
    f.mock.push(tool_call_reply(&[
        ("call_ask", "write_file", json!({"path": "a.txt", "content": "a"})),
        ("call_next", "list_directory", json!({"path": "."})),
    ]));
    f.answer([Reaction::Cancel]);
    let mut conversation = Conversation::default();

    assert_eq!(f.run(&mut conversation, "go").await.unwrap(), StopReason::Cancelled);

    assert!(!f.cwd().join("a.txt").exists());
    let messages = conversation.messages();
    assert_eq!(messages[2], tool("call_ask", CANCELLED_RESULT));
    assert_eq!(messages[3], tool("call_next", CANCELLED_RESULT));
    assert_eq!(messages.len(), 4);
    assert_eq!(f.events.statuses("call_ask"), [ToolCallStatus::Failed]);
    assert_eq!(f.events.statuses("call_next"), [ToolCallStatus::Failed]);
    assert_eq!(f.mock.chat_requests().len(), 1);
}

/// The user cancels while a tool runs: it winds down, and every call of the
/// answer has a result.
#[tokio::test(start_paused = true)]
async fn cancelled_while_a_tool_runs() {
    let mut f = Fixture::new().await;
    f.host = Box::new(CancelDuringRead { cancel: f.cancel.clone() });
    std::fs::write(f.cwd().join("a.txt"), "a").unwrap();
    f.mock.push(tool_call_reply(&[
        ("call_read", "read_file", json!({"path": "a.txt"})),
        ("call_after", "list_directory", json!({"path": "."})),
    ]));
    let mut conversation = Conversation::default();

    assert_eq!(f.run(&mut conversation, "go").await.unwrap(), StopReason::Cancelled);

    let messages = conversation.messages();
    assert_eq!(messages[2], tool("call_read", CANCELLED_RESULT));
    assert_eq!(messages[3], tool("call_after", CANCELLED_RESULT));
    assert_eq!(f.events.statuses("call_read"), [ToolCallStatus::InProgress, ToolCallStatus::Failed]);
    assert_eq!(f.events.statuses("call_after"), [ToolCallStatus::Failed]);
}

/// A cancel during the summary request (while it opens: no answer at all;
/// or while it streams: part of it, then silence) leaves the history as it
/// was, with the prompt answered by an (empty) interrupted answer as after
/// any cancel.
#[tokio::test(start_paused = true)]
async fn cancelled_while_summarising() {
    for summary in [Reply::NoAnswer, Reply::Sse(vec![ev_role(), ev_text("SUMM"), Step::Stall])] {
        let f = small_window().await;
        let mut conversation = long_history();
        let history = conversation.messages().to_vec();
        f.mock.push(summary);

        let stop = f.run_cancelled_at_request(&mut conversation, "/v1/chat/completions").await;

        assert_eq!(stop, StopReason::Cancelled);
        let messages = conversation.messages();
        assert_eq!(&messages[..6], &history[..]);
        assert_eq!(messages.len(), 8, "{messages:#?}");
        let last = messages.last();
        assert!(
            matches!(last, Some(Message::Assistant { text, interrupted: true, .. }) if text.is_empty()),
            "{last:?}"
        );
        assert_eq!(f.mock.chat_requests().len(), 1, "no request after the summary's");
        f.mock.wait_for_disconnects(1, WAIT).await;
    }
}

// ---------------------------------------------------------------------------
// Sub-agents (`task`)
// ---------------------------------------------------------------------------

/// The text of a chat request's system message.
fn system_text(body: &Value) -> String {
    sent_messages(body)[0]["content"].as_str().unwrap_or_default().to_owned()
}

/// The names of the tools a chat request offered.
fn offered_names(body: &Value) -> Vec<String> {
    body["tools"].as_array().map_or_else(Vec::new, |tools| {
        tools.iter().map(|tool| tool["function"]["name"].as_str().unwrap().to_owned()).collect()
    })
}

/// The last user message of a chat request.
fn last_user_text(body: &Value) -> String {
    sent_messages(body)
        .iter()
        .rev()
        .find(|message| message["role"] == "user")
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// An agent that may use every tool the parent has.
fn worker() -> crate::agents::AgentSpec {
    crate::agents::AgentSpec {
        name: "worker".to_owned(),
        description: "does anything".to_owned(),
        tools: None,
        model: None,
        prompt: "You are the worker.".to_owned(),
    }
}

/// The sub-agent's events, unwrapped.
fn child_events(events: &Recorder) -> Vec<AgentEvent> {
    events
        .all()
        .into_iter()
        .filter_map(|event| match event {
            AgentEvent::Subagent(SubagentEvent { change: SubagentChange::Event(inner), .. }) => Some(*inner),
            _ => None,
        })
        .collect()
}

/// A `task` call runs the explore agent in a conversation of its own: the
/// child's request carries the agent's system prompt and the job only (none
/// of the parent's history), offers read-only tools and no `task`; the
/// child reads a file; its answer is the parent's tool result, and the
/// parent's next request carries that result but none of the child's
/// reading. The children's tokens are added to the turn's usage.
#[tokio::test(start_paused = true)]
async fn a_task_runs_in_a_context_of_its_own() {
    let f = Fixture::new().await;
    std::fs::write(f.cwd().join("notes.txt"), "the secret is 42\n").unwrap();
    let job = "Read notes.txt and tell me the secret.";
    f.mock.push(tool_call_reply(&[("call_t", "task", json!({"description": "find the secret", "prompt": job}))]));
    f.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "notes.txt"}))]));
    f.mock.push(text_reply("The secret is in notes.txt: 42."));
    f.mock.push(text_reply("It is 42."));
    let mut conversation = Conversation::new(
        SystemPrompt::from("You are the parent."),
        vec![user("earlier"), assistant("sure", Vec::new())],
        None,
    );

    let stop = f.run(&mut conversation, "what is the secret?").await.unwrap();

    assert_eq!(stop, StopReason::EndTurn);
    let requests = f.mock.chat_requests();
    assert_eq!(requests.len(), 4);
    let child = &requests[1].body;
    assert!(system_text(child).contains("You explore a code base"), "{}", system_text(child));
    assert!(system_text(child).contains("cannot start sub-agents"), "{}", system_text(child));
    assert!(!system_text(child).contains("You are the parent."));
    let sent = sent_messages(child);
    assert_eq!(sent.len(), 2, "system prompt and the job only: {sent:#?}");
    assert_eq!(sent[1]["content"], job);
    assert_eq!(offered_names(child), ["read_file", "list_directory", "glob", "grep"]);
    assert!(offered_names(&requests[0].body).contains(&"task".to_owned()));
    assert!(tool_result(&requests[2].body, "call_r").contains("the secret is 42"));
    let parent = &requests[3].body;
    assert_eq!(tool_result(parent, "call_t"), "The secret is in notes.txt: 42.");
    assert!(!parent.to_string().contains("the secret is 42"), "the child's reading stays out of the parent's request");
    let messages = conversation.messages();
    assert_eq!(messages.len(), 6, "{messages:#?}");
    assert_eq!(messages[4], tool("call_t", "The secret is in notes.txt: 42."));
    // The user saw the child's call, scoped by the task's id, and its end.
    assert!(child_events(&f.events).iter().any(
        |event| matches!(event, AgentEvent::ToolCallStarted { id, name, .. } if id == "call_t.call_r" && name == "read_file")
    ));
    assert_eq!(f.events.statuses("call_t"), [ToolCallStatus::InProgress, ToolCallStatus::Completed]);
    // Four requests of 10 prompt tokens each; the usage shown is the parent's.
    assert_eq!(conversation.turn_usage.unwrap().input_tokens, 40);
    assert_eq!(f.events.usage().len(), 2, "only the parent's requests show their occupancy");
}

/// Two `task` calls in one response run at once: both children's requests
/// are in flight together (each held by the mock until both arrived), and
/// their results go back in the order of the calls although the second
/// finished first.
#[tokio::test(start_paused = true)]
async fn parallel_tasks_run_at_once_and_answer_in_call_order() {
    let f = Fixture::new().await;
    let (gate_a, gate_b) = (mock_openai::Gate::new(), mock_openai::Gate::new());
    for (job, gate, report) in [("job A", gate_a.clone(), "report A"), ("job B", gate_b.clone(), "report B")] {
        f.mock.rule(move |body| {
            (last_user_text(body) == job && sent_messages(body).len() == 2).then(|| {
                Reply::Sse(vec![
                    ev_role(),
                    Step::Gate(gate.clone()),
                    ev_text(report),
                    ev_finish("stop"),
                    ev_usage(10, 10),
                    Step::Done,
                ])
            })
        });
    }
    f.mock.push(tool_call_reply(&[
        ("call_1", "task", json!({"description": "a", "prompt": "job A"})),
        ("call_2", "task", json!({"description": "b", "prompt": "job B"})),
    ]));
    f.mock.push(text_reply("Both done."));
    let mut conversation = Conversation::default();

    let release = async {
        clock::poll_until("both children's requests are in flight", WAIT, || f.mock.chat_requests().len() == 3).await;
        gate_b.open();
        clock::poll_until("the second child ends", WAIT, || {
            f.events.all().iter().any(|event| {
                matches!(event, AgentEvent::Subagent(SubagentEvent { call_id, change: SubagentChange::Ended { .. }, .. }) if call_id == "call_2")
            })
        })
        .await;
        gate_a.open();
    };
    let (stop, ()) = tokio::join!(f.run(&mut conversation, "go"), release);

    assert_eq!(stop.unwrap(), StopReason::EndTurn);
    let messages = conversation.messages();
    assert_eq!(messages[2], tool("call_1", "report A"));
    assert_eq!(messages[3], tool("call_2", "report B"));
    let last = &f.mock.chat_requests()[3].body;
    assert_eq!(tool_result(last, "call_1"), "report A");
    assert_eq!(tool_result(last, "call_2"), "report B");
}

/// At most `[agent] max_parallel_tasks` children run at once: with 1, the
/// second child's request waits for the first child's end.
#[tokio::test(start_paused = true)]
async fn parallel_tasks_are_bounded() {
    let mut f = Fixture::new().await;
    f.config.agent.max_parallel_tasks = 1;
    let gate = mock_openai::Gate::new();
    let held = gate.clone();
    f.mock.rule(move |body| {
        (last_user_text(body) == "job A")
            .then(|| Reply::Sse(vec![ev_role(), Step::Gate(held.clone()), ev_text("A"), ev_finish("stop"), Step::Done]))
    });
    f.mock.push(tool_call_reply(&[
        ("call_1", "task", json!({"description": "a", "prompt": "job A"})),
        ("call_2", "task", json!({"description": "b", "prompt": "job B"})),
    ]));
    f.mock.push(text_reply("B"));
    f.mock.push(text_reply("Done."));
    let mut conversation = Conversation::default();

    let release = async {
        clock::poll_until("the first child's request", WAIT, || f.mock.chat_requests().len() == 2).await;
        // A second child started with the first would have said so before
        // the first one's request left.
        let started = |id: &str| {
            f.events.all().iter().any(|event| {
                matches!(event, AgentEvent::Subagent(SubagentEvent { call_id, change: SubagentChange::Started { .. }, .. }) if call_id == id)
            })
        };
        assert!(started("call_1") && !started("call_2"), "the second child waits");
        gate.open();
    };
    let (stop, ()) = tokio::join!(f.run(&mut conversation, "go"), release);

    assert_eq!(stop.unwrap(), StopReason::EndTurn);
    assert_eq!(last_user_text(&f.mock.chat_requests()[2].body), "job B");
}

/// Whether any live (non-zombie) process is in process group `pgid`.
fn group_alive(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return true };
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
        let Some((_, rest)) = stat.rsplit_once(") ") else { return false };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z"
    })
}

/// A cancel while two children stream and one runs a command: the turn
/// answers `cancelled` at once, no child request goes on, both streams are
/// dropped and the command's process tree is gone.
#[tokio::test(start_paused = true)]
async fn a_cancel_ends_every_sub_agent_and_its_commands() {
    if !crate::platform::testing::posix_shell() {
        return;
    }
    let mut f = Fixture::new().await;
    f.agents = crate::agents::Agents::with(vec![worker()]);
    f.policy = Mutex::new(Policy::new(Mode::FullAuto));
    f.mock.rule(|body| {
        (last_user_text(body) == "stream").then(|| Reply::Sse(vec![ev_role(), ev_text("Looking"), Step::Stall]))
    });
    f.mock.rule(|body| {
        (last_user_text(body) == "run" && sent_messages(body).len() == 2).then(|| {
            tool_call_reply(&[(
                "call_sh",
                "shell",
                json!({"command": "echo $$ > pgid.tmp; mv pgid.tmp pgid; sleep 300 & sleep 300 & wait"}),
            )])
        })
    });
    f.mock.push(tool_call_reply(&[
        ("call_1", "task", json!({"description": "a", "prompt": "stream"})),
        ("call_2", "task", json!({"description": "b", "prompt": "run", "agent": "worker"})),
    ]));
    let mut conversation = Conversation::default();
    let pgid_file = f.cwd().join("pgid");

    let cancel = async {
        let read = || std::fs::read_to_string(&pgid_file).ok().and_then(|text| text.trim().parse::<i32>().ok());
        clock::poll_until("the command runs and the other child streams", WAIT, || {
            read().is_some() && f.events.all().iter().any(|e| matches!(e, AgentEvent::Subagent(SubagentEvent { change: SubagentChange::Event(inner), .. }) if matches!(**inner, AgentEvent::AgentText { .. })))
        })
        .await;
        f.cancel.cancel();
        read().unwrap()
    };
    let (stop, pgid) = tokio::join!(f.run(&mut conversation, "go"), cancel);

    assert_eq!(stop.unwrap(), StopReason::Cancelled);
    assert_eq!(f.mock.chat_requests().len(), 3, "no child request after the cancel");
    f.mock.wait_for_disconnects(1, WAIT).await;
    clock::poll_until("the command's process group is gone", WAIT, || !group_alive(pgid)).await;
    let messages = conversation.messages();
    assert_eq!(messages[2], tool("call_1", CANCELLED_RESULT));
    assert_eq!(messages[3], tool("call_2", CANCELLED_RESULT));
    assert_eq!(f.events.statuses("call_1").last(), Some(&ToolCallStatus::Failed));
    assert_eq!(f.events.statuses("call_2").last(), Some(&ToolCallStatus::Failed));
}

/// A child that may write asks through the same approver, the question
/// naming the agent and the call by its id in the session; a read-only
/// child's write is refused without asking; no child can call `task`.
#[tokio::test(start_paused = true)]
async fn children_follow_the_parents_rules() {
    let mut f = Fixture::new().await;
    f.agents = crate::agents::Agents::with(vec![worker()]);
    f.mock.push(tool_call_reply(&[(
        "call_w",
        "task",
        json!({"description": "w", "prompt": "write", "agent": "worker"}),
    )]));
    f.mock.push(tool_call_reply(&[("call_f", "write_file", json!({"path": "out.txt", "content": "hi\n"}))]));
    f.mock.push(text_reply("Wrote it."));
    f.mock.push(tool_call_reply(&[("call_e", "task", json!({"description": "e", "prompt": "try to write"}))]));
    f.mock.push(tool_call_reply(&[
        ("call_x", "write_file", json!({"path": "no.txt", "content": "no\n"})),
        ("call_y", "task", json!({"description": "deeper", "prompt": "go deeper"})),
    ]));
    f.mock.push(text_reply("I could not."));
    f.mock.push(text_reply("Done."));
    f.answer([Reaction::Answer(Answer::AllowOnce)]);
    let mut conversation = Conversation::default();

    let stop = f.run(&mut conversation, "go").await.unwrap();

    assert_eq!(stop, StopReason::EndTurn);
    let asked = f.approver.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(asked[0].call_id, "call_w.call_f");
    assert!(asked[0].title.starts_with("worker agent: "), "{}", asked[0].title);
    assert_eq!(asked[0].parent_call_id.as_deref(), Some("call_w"));
    assert_eq!(std::fs::read_to_string(f.cwd().join("out.txt")).unwrap(), "hi\n");
    assert!(!offered_names(&f.mock.chat_requests()[1].body).contains(&"task".to_owned()));
    let explore_results = &f.mock.chat_requests()[5].body;
    assert!(tool_result(explore_results, "call_x").contains("There is no tool named \"write_file\""));
    assert!(tool_result(explore_results, "call_y").contains("There is no tool named \"task\""));
    assert!(!f.cwd().join("no.txt").exists());
}

/// An unknown agent or an empty job is refused with a message for the model.
#[tokio::test(start_paused = true)]
async fn a_task_the_model_got_wrong_is_explained() {
    let f = Fixture::new().await;
    f.mock.push(tool_call_reply(&[
        ("call_u", "task", json!({"description": "u", "prompt": "x", "agent": "nobody"})),
        ("call_e", "task", json!({"description": "e", "prompt": "  "})),
    ]));
    f.mock.push(text_reply("Sorry."));
    let mut conversation = Conversation::default();

    f.run(&mut conversation, "go").await.unwrap();

    let last = &f.mock.chat_requests()[1].body;
    assert_eq!(tool_result(last, "call_u"), "There is no agent named \"nobody\". Agents: explore.");
    assert!(tool_result(last, "call_e").contains("the prompt is empty"));
    assert_eq!(f.mock.chat_requests().len(), 2, "no child ran");
}

/// An agent that names write tools gets no more than the mode allows: in
/// read-only mode its write is refused without asking.
#[tokio::test(start_paused = true)]
async fn a_child_never_has_what_the_mode_denies() {
    let mut f = Fixture::new().await;
    f.agents = crate::agents::Agents::with(vec![worker()]);
    f.policy = Mutex::new(Policy::new(Mode::ReadOnly));
    f.mock.push(tool_call_reply(&[(
        "call_w",
        "task",
        json!({"description": "w", "prompt": "write", "agent": "worker"}),
    )]));
    f.mock.push(tool_call_reply(&[("call_f", "write_file", json!({"path": "out.txt", "content": "hi\n"}))]));
    f.mock.push(text_reply("Could not."));
    f.mock.push(text_reply("Done."));
    let mut conversation = Conversation::default();

    f.run(&mut conversation, "go").await.unwrap();

    assert!(f.approver.asked.lock().unwrap().is_empty());
    assert!(!f.cwd().join("out.txt").exists());
    let refused = tool_result(&f.mock.chat_requests()[2].body, "call_f");
    assert!(refused.to_lowercase().contains("read-only") || refused.contains("mode"), "{refused}");
}
