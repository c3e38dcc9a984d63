//! The turn loop: sample the model, stream what it says to the user, run the
//! tools it asks for (asking the user first where the policy says so), feed
//! the results back, and repeat until the model is done.
//!
//! A turn reaches the outside world only through three seams: [`EventSink`]
//! (what the user should see), [`Approver`] (asking the user), and the tools'
//! [`Host`] (files and terminals). It knows nothing of ACP or JSON-RPC: the
//! `acp` module implements the seams and maps [`AgentEvent`]s to
//! `session/update`s and [`StopReason`] to the wire.
//!
//! Cancellation: every await that can wait (opening the stream, each chunk,
//! each permission answer, each tool run) is raced against the turn's token
//! in a `biased` `select!`, so a stalled upstream or a silent editor is
//! interrupted, not waited out. A cancelled turn leaves the conversation valid
//! for the next request: a partial answer is kept and marked as interrupted,
//! and every tool call the model made gets a result ("cancelled" for the ones
//! that did not finish). Every tool call the user saw gets a final status
//! before the turn returns.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::AgentSettings;
use crate::model::{
    FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelOutput, StreamDecoder, ToolCallRequest,
    ToolDefinition, UserPart,
};
use crate::permission::{Answer, Approver, PermissionQuestion, Policy, Verdict};
use crate::session::Conversation;
use crate::tools::{
    self, CANCELLED_RESULT, DisplayContent, Host, Location, OutcomeStatus, PlanItem, Progress, Tool, ToolContext,
    ToolKind, ToolLimits, ToolOutcome,
};

/// Something the user should see, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A piece of the answer.
    AgentText {
        /// Identifies the message this piece belongs to.
        message_id: Arc<str>,
        /// The text.
        text: String,
    },
    /// A piece of the model's reasoning.
    AgentThought {
        /// Identifies the thought this piece belongs to.
        message_id: Arc<str>,
        /// The text.
        text: String,
    },
    /// The model started a tool call.
    ToolCallStarted {
        /// Unique within the session.
        id: String,
        /// Human title.
        title: String,
        /// What kind of work it does.
        kind: ToolKind,
    },
    /// A tool call changed.
    ToolCallUpdated {
        /// The call.
        id: String,
        /// What changed.
        change: ToolCallChange,
    },
    /// The model's plan, complete.
    Plan(Vec<PlanItem>),
    /// Context-window occupancy after a model request.
    Usage {
        /// Tokens in use.
        used: u64,
        /// The window.
        size: u64,
    },
}

/// The status of a tool call as the user sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCallStatus {
    /// Waiting (for arguments or permission).
    Pending,
    /// Running.
    InProgress,
    /// Done.
    Completed,
    /// Failed, declined or cancelled.
    Failed,
}

/// The changed fields of a tool call; `None` leaves a field as it was.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolCallChange {
    /// New title.
    pub title: Option<String>,
    /// New kind.
    pub kind: Option<ToolKind>,
    /// New status.
    pub status: Option<ToolCallStatus>,
    /// New content (replaces the old).
    pub content: Option<Vec<DisplayContent>>,
    /// New locations (replace the old).
    pub locations: Option<Vec<Location>>,
    /// The parsed arguments.
    pub raw_input: Option<serde_json::Value>,
    /// Structured output.
    pub raw_output: Option<serde_json::Value>,
}

/// Where a turn sends what the user should see. Emitting never blocks.
pub trait EventSink: Send + Sync {
    /// Delivers one event.
    fn emit(&self, event: AgentEvent);
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model finished.
    EndTurn,
    /// The model hit its output-token limit.
    MaxTokens,
    /// The turn used up its model requests.
    MaxTurnRequests,
    /// The model (or the provider's filter) refused.
    Refusal,
    /// The user cancelled.
    Cancelled,
}

/// Why a turn failed.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The model request failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Where tools work and who decides whether they may.
pub struct Workspace<'a> {
    /// The session cwd.
    pub cwd: &'a std::path::Path,
    /// The session roots (cwd and additional directories).
    pub roots: &'a [PathBuf],
    /// Files and terminals.
    pub host: &'a dyn Host,
    /// Asks the user.
    pub approver: &'a dyn Approver,
    /// The session's permission policy (its mode can change mid-turn).
    pub policy: &'a Mutex<Policy>,
    /// Tool output and time limits.
    pub limits: &'a ToolLimits,
}

/// What one turn needs, borrowed from the session and the server.
pub struct Turn<'a> {
    /// The model to sample.
    pub client: &'a ModelClient,
    /// Turn limits.
    pub settings: &'a AgentSettings,
    /// Where events go.
    pub events: &'a dyn EventSink,
    /// Cancelled when the user cancels (or the session or process ends).
    pub cancel: &'a CancellationToken,
    /// Where tools work.
    pub workspace: Workspace<'a>,
    /// The tools offered to the model.
    pub tools: &'a [ToolDefinition],
}

enum Sample {
    Done(ModelOutput),
    Cancelled(Option<StreamDecoder>),
    Failed(ModelError, Option<StreamDecoder>),
}

/// Time a tool gets to wind down (kill its processes, withdraw its requests)
/// after the turn is cancelled, before the turn stops waiting for it.
const TOOL_CANCEL_GRACE: Duration = Duration::from_millis(100);

impl Turn<'_> {
    /// Runs one turn for the user's message, appending to `conversation`.
    ///
    /// Takes the initial user input, then loops: each model response either
    /// asks for tools (they run, their results are appended, and the model is
    /// sampled again) or is the final answer (the turn ends). On cancel the
    /// result is `Ok(StopReason::Cancelled)`, never an error.
    pub async fn run(&self, conversation: &mut Conversation, user: Vec<UserPart>) -> Result<StopReason, TurnError> {
        let turn_start = conversation.messages.len();
        conversation.messages.push(Message::User { parts: user });
        let mut requests = 0u32;
        loop {
            if requests >= self.settings.max_model_requests_per_turn {
                return Ok(StopReason::MaxTurnRequests);
            }
            requests += 1;
            let output = match self.sample(conversation).await {
                Sample::Done(output) => output,
                Sample::Cancelled(partial) => {
                    keep_interrupted(conversation, partial);
                    return Ok(StopReason::Cancelled);
                }
                Sample::Failed(error, partial) => {
                    keep_interrupted(conversation, partial);
                    return Err(error.into());
                }
            };
            if let Some(usage) = output.usage {
                self.events.emit(AgentEvent::Usage {
                    used: usage.input_tokens + usage.output_tokens,
                    size: self.client.model().context_window,
                });
            }
            let refused = output.refused || output.finish_reason == FinishReason::ContentFilter;
            let finish_reason = output.finish_reason.clone();
            let tool_calls = output.tool_calls.clone();
            conversation.messages.push(Message::Assistant {
                text: output.text,
                reasoning: output.reasoning,
                tool_calls: output.tool_calls,
                interrupted: false,
            });
            if refused {
                // ACP: after a refusal the prompt and everything after it are
                // left out of the next request.
                for call in &tool_calls {
                    self.finish_call(&call.id, ToolOutcome::failed("Not run: the model refused."));
                }
                conversation.messages.truncate(turn_start);
                return Ok(StopReason::Refusal);
            }
            if finish_reason == FinishReason::Length {
                for call in &tool_calls {
                    let outcome = ToolOutcome::failed("Not run: the response hit the output-token limit.");
                    self.finish_call(&call.id, outcome.clone());
                    conversation.messages.push(tool_result(call, outcome.for_model));
                }
                return Ok(StopReason::MaxTokens);
            }
            if tool_calls.is_empty() {
                return Ok(StopReason::EndTurn);
            }
            if self.run_tools(conversation, &tool_calls).await == Flow::Cancelled {
                return Ok(StopReason::Cancelled);
            }
        }
    }

    /// Runs the calls one after another, appending each result. After a
    /// cancel, the calls that did not run get a "cancelled" result.
    async fn run_tools(&self, conversation: &mut Conversation, calls: &[ToolCallRequest]) -> Flow {
        for (index, call) in calls.iter().enumerate() {
            let (result, flow) = if self.cancel.is_cancelled() {
                self.finish_call(&call.id, ToolOutcome::cancelled());
                (CANCELLED_RESULT.to_owned(), Flow::Cancelled)
            } else {
                self.run_tool(call).await
            };
            conversation.messages.push(tool_result(call, result));
            if flow == Flow::Cancelled {
                for rest in &calls[index + 1..] {
                    self.finish_call(&rest.id, ToolOutcome::cancelled());
                    conversation.messages.push(tool_result(rest, CANCELLED_RESULT.to_owned()));
                }
                return Flow::Cancelled;
            }
        }
        Flow::Continue
    }

    /// One call: describe it, judge it, maybe ask, run it, report it.
    /// Returns the result for the model.
    async fn run_tool(&self, call: &ToolCallRequest) -> (String, Flow) {
        let workspace = &self.workspace;
        let raw_input = serde_json::from_str::<serde_json::Value>(&call.arguments).ok();
        let prepared = match tools::prepare(&call.name, &call.arguments, workspace.cwd) {
            Ok(prepared) => prepared,
            Err(message) => {
                let mut outcome = ToolOutcome::failed(message);
                outcome.raw_output = None;
                self.update(&call.id, ToolCallChange { raw_input, ..ToolCallChange::default() });
                let for_model = outcome.for_model.clone();
                self.finish_call(&call.id, outcome);
                return (for_model, Flow::Continue);
            }
        };
        let tool = prepared.tool;
        let description = prepared.description.clone();
        self.update(
            &call.id,
            ToolCallChange {
                title: Some(description.title.clone()),
                kind: Some(tool.kind()),
                locations: Some(description.locations.clone()),
                raw_input: raw_input.clone(),
                ..ToolCallChange::default()
            },
        );
        let verdict = lock(workspace.policy).judge(tool, &description.access, workspace.roots);
        match verdict {
            Verdict::Allow => {}
            Verdict::Deny(reason) => {
                self.finish_call(&call.id, ToolOutcome::failed(reason.clone()));
                return (reason, Flow::Continue);
            }
            Verdict::Ask => {
                let choices = lock(workspace.policy).options(tool, &description.access, workspace.roots);
                let question = PermissionQuestion {
                    call_id: call.id.clone(),
                    title: description.title.clone(),
                    kind: tool.kind(),
                    locations: description.locations.clone(),
                    preview: description.preview.clone(),
                    raw_input,
                    choices,
                };
                let answer = tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => Answer::Cancelled,
                    answer = workspace.approver.ask(&question) => match answer {
                        Ok(answer) => answer,
                        Err(err) => {
                            let message = format!("Not run: the editor could not ask the user for permission ({err}).");
                            self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
                            return (message, Flow::Continue);
                        }
                    },
                };
                lock(workspace.policy).remember(tool, &description.access, workspace.roots, answer);
                match answer {
                    Answer::AllowOnce | Answer::AllowAlways => {}
                    Answer::RejectOnce | Answer::RejectAlways => {
                        let message = "The user declined this tool call. Do not retry it as is; \
                                       ask the user how to proceed or take another approach."
                            .to_owned();
                        self.finish_call(&call.id, ToolOutcome::failed("Declined by the user."));
                        return (message, Flow::Continue);
                    }
                    Answer::Cancelled => {
                        self.finish_call(&call.id, ToolOutcome::cancelled());
                        return (CANCELLED_RESULT.to_owned(), Flow::Cancelled);
                    }
                }
            }
        }
        self.update(&call.id, ToolCallChange { status: Some(ToolCallStatus::InProgress), ..ToolCallChange::default() });
        let call_id = call.id.clone();
        let progress = move |progress: Progress| match progress {
            Progress::Terminal(terminal_id) => self.update(
                &call_id,
                ToolCallChange {
                    content: Some(vec![DisplayContent::Terminal(terminal_id)]),
                    ..ToolCallChange::default()
                },
            ),
            Progress::Plan(items) => self.events.emit(AgentEvent::Plan(items)),
        };
        let context = ToolContext {
            cwd: workspace.cwd,
            roots: workspace.roots,
            host: workspace.host,
            cancel: self.cancel,
            limits: workspace.limits,
            progress: &progress,
        };
        let running = tools::run(prepared, &context);
        tokio::pin!(running);
        let outcome = tokio::select! {
            biased;
            outcome = &mut running => outcome,
            () = self.cancel.cancelled() => {
                // The tool sees the same token; give it a moment to clean up.
                tokio::time::timeout(TOOL_CANCEL_GRACE, &mut running).await.unwrap_or_else(|_| ToolOutcome::cancelled())
            }
        };
        let flow = if outcome.status == OutcomeStatus::Cancelled || self.cancel.is_cancelled() {
            Flow::Cancelled
        } else {
            Flow::Continue
        };
        let for_model = if flow == Flow::Cancelled { CANCELLED_RESULT.to_owned() } else { outcome.for_model.clone() };
        self.finish_call(&call.id, outcome);
        (for_model, flow)
    }

    fn update(&self, id: &str, change: ToolCallChange) {
        self.events.emit(AgentEvent::ToolCallUpdated { id: id.to_owned(), change });
    }

    /// The final update of a call.
    fn finish_call(&self, id: &str, outcome: ToolOutcome) {
        let status = match outcome.status {
            OutcomeStatus::Completed => ToolCallStatus::Completed,
            OutcomeStatus::Failed | OutcomeStatus::Cancelled => ToolCallStatus::Failed,
        };
        self.update(
            id,
            ToolCallChange {
                status: Some(status),
                content: Some(outcome.content),
                locations: outcome.locations,
                raw_output: outcome.raw_output,
                ..ToolCallChange::default()
            },
        );
    }

    /// One model request, streamed to the user as it arrives.
    async fn sample(&self, conversation: &mut Conversation) -> Sample {
        let request_id = uuid::Uuid::new_v4().simple().to_string();
        let message_id: Arc<str> = Arc::from(format!("msg_{request_id}"));
        let thought_id: Arc<str> = Arc::from(format!("thought_{request_id}"));
        let opened = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Sample::Cancelled(None),
            opened = self.client.stream(&conversation.system_prompt, &conversation.messages, self.tools) => opened,
        };
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => return Sample::Failed(error, None),
        };
        let mut decoder = StreamDecoder::new(format!("call_{}_", &request_id[..12]));
        // Calls shown to the user while streaming, by the decoder's id -> the session-unique id.
        let mut announced: HashMap<String, String> = HashMap::new();
        let used_ids = &mut conversation.tool_call_ids;
        let events = self.events;
        let mut forward = |event: ModelEvent| match event {
            ModelEvent::Text(text) => events.emit(AgentEvent::AgentText { message_id: message_id.clone(), text }),
            ModelEvent::Reasoning(text) => {
                events.emit(AgentEvent::AgentThought { message_id: thought_id.clone(), text })
            }
            ModelEvent::ToolCallStarted { id, name, .. } => {
                let unique = unique_id(used_ids, &id);
                let title = Tool::from_name(&name).map_or_else(|| name.clone(), |tool| pending_title(tool).to_owned());
                let kind = Tool::from_name(&name).map_or(ToolKind::Other, Tool::kind);
                events.emit(AgentEvent::ToolCallStarted { id: unique.clone(), title, kind });
                announced.insert(id, unique);
            }
        };
        let ended = loop {
            let item = tokio::select! {
                biased;
                () = self.cancel.cancelled() => break Sample::Cancelled(Some(decoder)),
                item = stream.next() => item,
            };
            match item {
                None => break Sample::Done(decoder.finish()),
                Some(Ok(chunk)) => {
                    if let Err(reported) = decoder.push(chunk, &mut forward) {
                        break Sample::Failed(ModelError::Provider(reported.0), Some(decoder));
                    }
                }
                Some(Err(error)) => break Sample::Failed(error, Some(decoder)),
            }
        };
        match ended {
            Sample::Done(mut output) => {
                for call in &mut output.tool_calls {
                    call.id = match announced.get(&call.id) {
                        Some(unique) => unique.clone(),
                        None => unique_id(&mut conversation.tool_call_ids, &call.id),
                    };
                }
                Sample::Done(output)
            }
            interrupted => {
                // Calls the user saw start but that will never run.
                for id in announced.values() {
                    let outcome = match interrupted {
                        Sample::Cancelled(_) => ToolOutcome::cancelled(),
                        _ => ToolOutcome::failed("Not run: the model's response broke off."),
                    };
                    self.finish_call(id, outcome);
                }
                interrupted
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Cancelled,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The title shown while the model is still writing a call's arguments.
fn pending_title(tool: Tool) -> &'static str {
    match tool {
        Tool::ReadFile => "Read file",
        Tool::WriteFile => "Write file",
        Tool::EditFile => "Edit file",
        Tool::ListDirectory => "List directory",
        Tool::Glob => "Find files",
        Tool::Grep => "Search",
        Tool::Shell => "Run command",
        Tool::UpdatePlan => "Update plan",
    }
}

/// A tool-call id unique within the session: ACP requires it, and some
/// servers number their calls `call_0`, `call_1` afresh in every response.
fn unique_id(used: &mut std::collections::HashSet<String>, id: &str) -> String {
    if used.insert(id.to_owned()) {
        return id.to_owned();
    }
    (2u64..)
        .map(|n| format!("{id}_{n}"))
        .find(|candidate| used.insert(candidate.clone()))
        .unwrap_or_else(|| format!("{id}_{}", uuid::Uuid::new_v4().simple()))
}

fn tool_result(call: &ToolCallRequest, content: String) -> Message {
    Message::Tool { tool_call_id: call.id.clone(), content }
}

/// Keeps what the user already saw of an answer that did not finish, marked
/// as interrupted. Tool calls of an unfinished answer never ran and are
/// dropped. The marker message is kept even when empty so that user and
/// assistant messages keep alternating (some chat templates insist).
fn keep_interrupted(conversation: &mut Conversation, partial: Option<StreamDecoder>) {
    let (text, reasoning) = match partial {
        Some(decoder) => {
            let output = decoder.finish();
            (output.text, output.reasoning)
        }
        None => (String::new(), String::new()),
    };
    conversation.messages.push(Message::Assistant { text, reasoning, tool_calls: Vec::new(), interrupted: true });
}
