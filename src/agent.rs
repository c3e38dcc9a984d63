//! The turn loop: sample the model, stream what it says to the user, run the
//! tools it asks for (asking the user first where the policy says so), feed
//! the results back, and repeat until the model is done.
//!
//! A turn reaches the outside world only through four seams: [`EventSink`]
//! (what the user should see), [`Approver`] (asking the user), the tools'
//! [`Host`] (files and terminals), and [`ExternalTools`] (tools that live
//! outside lathe, i.e. MCP servers: their definitions are offered after the
//! built-ins, and calls no built-in answers go to them). It knows nothing of
//! ACP, JSON-RPC or MCP: the `acp` module implements the seams and maps
//! [`AgentEvent`]s to `session/update`s and [`StopReason`] to the wire.
//!
//! Cancellation: every await that can wait (opening the stream, each retry
//! back-off, each chunk, each permission answer, each tool run) is raced
//! against the turn's token with [`or_cancel`](crate::cancel::OrCancel::or_cancel), so a stalled upstream or
//! a silent editor is interrupted, not waited out. A cancelled turn leaves the
//! conversation valid for the next request: a partial answer is kept and marked as interrupted,
//! and every tool call the model made gets a result ("cancelled" for the ones
//! that did not finish). Every tool call the user saw gets a final status
//! before the turn returns.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::agents::Agents;
use crate::cancel::{Cancelled, OrCancel as _};
use crate::config::{AgentSettings, ContextSettings, HookEvent, TextToolCalls};
use crate::hooks::{Answers, Decision as HookDecision, SessionHooks, TurnHooks};
use crate::model::retry::{self, Decision, Exhausted, Retrier};
use crate::model::{
    FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelOutput, OversizedCall, ResponseStream,
    StreamDecoder, ToolCallRequest, ToolDefinition, UserPart,
};
use crate::permission::{
    Answer, Approver, AskError, Mode, PermissionQuestion, Policy, UserChoice, UserQuestion, UserReply, Verdict,
};
use crate::present::text::{Lines, shown};
use crate::prompt::SystemPrompt;
use crate::session::Steers;
use crate::session::{Conversation, UsageMark};
use crate::sync::lock;
use crate::tools::fetch::HostTrust;
use crate::tools::{
    self, Access, CANCELLED_RESULT, Description, DisplayContent, ExternalCall, ExternalTools, Host, Interaction,
    Location, OutcomeStatus, PlanItem, PreparedCall, Progress, Tool, ToolContext, ToolKind, ToolLimits, ToolOutcome,
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
        /// The tool's name, as the model called it.
        name: String,
    },
    /// A message from the user that the turn read between two model
    /// requests: a steer (see [`crate::session::Session::steer`]).
    UserText {
        /// Identifies the message.
        message_id: Arc<str>,
        /// The text.
        text: String,
    },
    /// A warning the user should see once, that is not part of the
    /// conversation (an MCP server that could not start, a model that takes
    /// no tools).
    Notice {
        /// What it is about, in a few words.
        title: String,
        /// The whole warning, as a message would say it.
        text: String,
    },
    /// The plan written in plan mode, in Markdown, complete (it replaces
    /// any earlier one).
    PlanDocument {
        /// The plan.
        markdown: String,
    },
    /// The turn switched the session's mode (the user approved a plan).
    ModeChanged(Mode),
    /// The history is being summarised to fit the context window.
    Compaction(CompactionEvent),
    /// A tool call changed.
    ToolCallUpdated {
        /// The call.
        id: String,
        /// What changed.
        change: ToolCallChange,
    },
    /// The model's plan, complete.
    Plan(Vec<PlanItem>),
    /// Something a sub-agent (a `task` call) did.
    Subagent(SubagentEvent),
    /// Context-window occupancy after a model request.
    Usage {
        /// Tokens in use.
        used: u64,
        /// The window.
        size: u64,
        /// Whether `used` is lathe's estimate (the server reported no usage).
        estimated: bool,
        /// What the session's requests cost so far, when known.
        cost: Option<f64>,
    },
}

/// What a sub-agent did, under the `task` call that runs it (see `task`).
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentEvent {
    /// The `task` call.
    pub call_id: String,
    /// The agent's name.
    pub agent: Arc<str>,
    /// What happened.
    pub change: SubagentChange,
}

/// A sub-agent's life.
#[derive(Debug, Clone, PartialEq)]
pub enum SubagentChange {
    /// It started on the job.
    Started {
        /// What the model said the job is, in a few words.
        description: String,
        /// The job, as the sub-agent reads it.
        job: String,
    },
    /// One of its own events. Its tool-call ids are already scoped by the
    /// `task` call's (`<task call id>.<its id>`), so they are unique in the
    /// session; its usage is not among them (it is added to the turn's).
    Event(Box<AgentEvent>),
    /// It ended (after the task call's final update).
    Ended {
        /// How its turn ended; `None` when it failed.
        stop: Option<StopReason>,
        /// Its report, when it gave one (the task call's result).
        report: Option<String>,
    },
}

/// A compaction's progress (see [`Compactor`]).
#[derive(Debug, Clone, PartialEq)]
pub enum CompactionEvent {
    /// It began.
    Started {
        /// Identifies it within the session.
        id: Arc<str>,
    },
    /// A piece of the summary, as the model writes it.
    Summary {
        /// The compaction.
        id: Arc<str>,
        /// The text.
        text: String,
    },
    /// It ended.
    Finished {
        /// The compaction.
        id: Arc<str>,
        /// How.
        outcome: CompactionOutcome,
    },
}

/// How a compaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// The history was replaced by this summary.
    Completed(String),
    /// The summary request failed; the history is as it was.
    Failed(String),
    /// The user cancelled; the history is as it was.
    Cancelled,
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
    /// The model request failed after retries, or lathe declined to wait as
    /// long as the endpoint asked; the error is the last attempt's.
    #[error("{error} ({retries})")]
    Retried {
        /// The last attempt's failure.
        error: ModelError,
        /// How many attempts were made and why there was no other.
        retries: Exhausted,
    },
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
    /// The file versions the model has seen this session.
    pub seen: &'a tools::versions::FileVersions,
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
    /// The built-in tools offered to the model.
    pub tools: &'a [ToolDefinition],
    /// Tools that live outside lathe (the session's MCP servers), if any.
    /// Their [`ExternalTools::definitions`] (built-ins included) are then
    /// what each request offers, read afresh for every request.
    pub external: Option<&'a dyn ExternalTools>,
    /// How the conversation is kept within the model's window.
    pub context: &'a ContextSettings,
    /// Where steering messages wait (see [`crate::session::Session::steer`]);
    /// `None` for a turn nobody steers.
    pub steers: Option<&'a Steers>,
    /// The agents a `task` call can run (see `task`).
    pub agents: &'a Agents,
    /// Where "always" answers that outlast the session are written down
    /// (`None`: nowhere; they then hold in memory only).
    pub rules: Option<&'a crate::rules::SessionRules>,
    /// The session's hooks (`None`: none run).
    pub hooks: Option<&'a SessionHooks>,
}

/// How many times in one turn a `Stop` hook may send the model back to work.
const MAX_STOP_CONTINUATIONS: u32 = 8;

/// The tools one request offers: the built-ins, or the external source's
/// complete list.
enum Offered<'a> {
    Builtin(&'a [ToolDefinition]),
    WithExternal(Arc<[ToolDefinition]>),
    /// Either, then `exit_plan_mode` (see [`Conversation::plan_tools`]).
    WithPlan(Vec<ToolDefinition>),
}

impl Deref for Offered<'_> {
    type Target = [ToolDefinition];

    fn deref(&self) -> &[ToolDefinition] {
        match self {
            Offered::Builtin(tools) => tools,
            Offered::WithExternal(tools) => tools,
            Offered::WithPlan(tools) => tools,
        }
    }
}

/// The message the model reads with a prompt given in plan mode.
const PLAN_MODE_NOTE: &str = include_str!("../prompts/plan_mode.md");

/// A call ready to run: a built-in tool's, or an external tool's with the
/// source that runs it.
enum Runnable<'a> {
    Builtin(PreparedCall),
    External(&'a dyn ExternalTools, ExternalCall),
}

enum Sample {
    Done(ModelOutput),
    Cancelled(Option<StreamDecoder>),
    Failed(TurnError, Option<StreamDecoder>),
}

impl Turn<'_> {
    /// Runs one turn for the user's message, appending to `conversation`.
    ///
    /// Takes the initial user input, then loops: each model response either
    /// asks for tools (they run, their results are appended, and the model is
    /// sampled again) or is the final answer (the turn ends). On cancel the
    /// result is `Ok(StopReason::Cancelled)`, never an error.
    pub async fn run(&self, conversation: &mut Conversation, mut user: Vec<UserPart>) -> Result<StopReason, TurnError> {
        let mut turn_start = conversation.messages().len();
        conversation.turn_usage = None;
        // Steers left by a turn that ended before reading them (cancelled,
        // or the process ended), or sent while this one waited: they join
        // the prompt (one user message: strict chat templates want user and
        // assistant to alternate).
        for parts in self.steers.map(Steers::take).unwrap_or_default() {
            self.show_steer(&parts);
            user.extend(parts);
        }
        // The prompt's hooks see what the user wrote, not the plan mode's note.
        let (hooks, mut user) = match self.prompt_hooks(user).await {
            Ok(Prompted::Go(hooks, user)) => (hooks, user),
            Ok(Prompted::Blocked) => return Ok(StopReason::EndTurn),
            Err((Cancelled, user)) => {
                conversation.push(Message::User { parts: user });
                keep_interrupted(conversation, None);
                return Ok(StopReason::Cancelled);
            }
        };
        if self.mode() == Mode::Plan {
            // Said with the prompt, not in the system prompt: the request's
            // prefix stays the same whatever the mode.
            user.push(UserPart::Text { text: PLAN_MODE_NOTE.trim().to_owned() });
        }
        conversation.push(Message::User { parts: user });
        if let Some(external) = self.external {
            // Servers still starting get their (bounded) chance before the
            // first request, so it offers their tools.
            let notices = external.settle(self.cancel).await;
            if self.cancel.is_cancelled() {
                keep_interrupted(conversation, None);
                return Ok(StopReason::Cancelled);
            }
            for text in notices {
                self.events.emit(AgentEvent::Notice { title: "An MCP server is unavailable".to_owned(), text });
            }
        }
        // The model's window (maybe asked of the server, once) decides the
        // prompt profile and when to compact.
        if !settle_model(self.client, self.cancel).await {
            keep_interrupted(conversation, None);
            return Ok(StopReason::Cancelled);
        }
        let mut requests = 0u32;
        let mut stop_continuations = 0u32;
        loop {
            if requests >= self.settings.max_model_requests_per_turn {
                return Ok(StopReason::MaxTurnRequests);
            }
            requests += 1;
            if requests > 1 {
                self.read_steers(conversation);
            }
            if self.mode() == Mode::Plan {
                conversation.plan_tools = true;
            }
            if self.needs_compaction(conversation) {
                match self.compact(conversation, Some(turn_start)).await {
                    Compaction::Done { turn_start: moved } => turn_start = moved,
                    Compaction::NothingToDo | Compaction::Failed(_) => {}
                    Compaction::Cancelled => {
                        keep_interrupted(conversation, None);
                        return Ok(StopReason::Cancelled);
                    }
                }
            }
            let output = match self.sample(conversation).await {
                Sample::Done(output) => output,
                Sample::Cancelled(partial) => {
                    keep_interrupted(conversation, partial);
                    return Ok(StopReason::Cancelled);
                }
                Sample::Failed(error, partial) => {
                    keep_interrupted(conversation, partial);
                    return Err(error);
                }
            };
            let size = self.client.context_window();
            let used = match output.usage {
                Some(usage) => usage.input_tokens + usage.output_tokens,
                None => self.estimate(conversation) + estimate_text_tokens(&output.text),
            };
            if let Some(usage) = output.usage {
                let total = conversation.turn_usage.get_or_insert_default();
                total.input_tokens += usage.input_tokens;
                total.output_tokens += usage.output_tokens;
                // The server's own figure, else the configured prices.
                let cost = usage.cost.or_else(|| self.client.model().priced(usage.input_tokens, usage.output_tokens));
                if let Some(cost) = cost {
                    *conversation.cost.get_or_insert(0.0) += cost;
                }
            }
            let cost = conversation.cost;
            self.events.emit(AgentEvent::Usage { used, size, estimated: output.usage.is_none(), cost });
            let refused = output.refused || output.finish_reason == FinishReason::ContentFilter;
            let finish_reason = output.finish_reason.clone();
            let tool_calls = output.tool_calls.clone();
            let from_text = output.text_tool_calls.is_some();
            if let Some(format) = output.text_tool_calls {
                let names: Vec<&str> = tool_calls.iter().map(|call| call.name.as_str()).collect();
                tracing::debug!(format = format.name(), calls = ?names, "recovered tool calls the model wrote as text");
            }
            let oversized = output.oversized.clone();
            let answer = if tool_calls.is_empty() { output.text.clone() } else { String::new() };
            conversation.push(Message::Assistant {
                text: output.text,
                reasoning: output.reasoning,
                reasoning_field: output.reasoning_field,
                reasoning_details: output.reasoning_details.map(Box::new),
                tool_calls: output.tool_calls,
                interrupted: false,
            });
            conversation.usage_mark = Some(UsageMark { tokens: used, messages: conversation.messages().len() });
            if refused {
                // ACP: after a refusal the prompt and everything after it are
                // left out of the next request.
                for call in &tool_calls {
                    self.finish_call(&call.id, ToolOutcome::failed("Not run: the model refused."));
                }
                conversation.truncate(turn_start);
                return Ok(StopReason::Refusal);
            }
            if finish_reason == FinishReason::Length {
                for call in &tool_calls {
                    let outcome = ToolOutcome::failed("Not run: the response hit the output-token limit.");
                    self.finish_call(&call.id, outcome.clone());
                    conversation.push(self.tool_result(call, outcome.for_model));
                }
                return Ok(StopReason::MaxTokens);
            }
            if tool_calls.is_empty() {
                // A steer that came while the model answered is read by
                // another request of this turn, not left for the next one.
                if self.steers.is_some_and(Steers::is_waiting) {
                    continue;
                }
                // A `Stop` hook may send the model back to work, a few times.
                let again = stop_continuations < MAX_STOP_CONTINUATIONS;
                match self.stop_hooks(&hooks, &answer, stop_continuations > 0).await {
                    Err(Cancelled) => return Ok(StopReason::Cancelled),
                    Ok(Some(reason)) if again => {
                        stop_continuations += 1;
                        let text = format!("A Stop hook asks you to go on before you finish:\n{reason}");
                        conversation.push(Message::User { parts: vec![UserPart::Text { text }] });
                        continue;
                    }
                    Ok(_) => return Ok(StopReason::EndTurn),
                }
            }
            match self.run_tools(conversation, &tool_calls, &oversized, from_text, &hooks).await {
                Flow::Cancelled => return Ok(StopReason::Cancelled),
                Flow::Stopped => return Ok(StopReason::EndTurn),
                Flow::Continue => {}
            }
        }
    }

    /// The session's current mode.
    fn mode(&self) -> Mode {
        lock(self.workspace.policy).mode()
    }

    /// Appends the steering messages that came since the last request, as
    /// the user's, and shows them.
    fn read_steers(&self, conversation: &mut Conversation) {
        let Some(steers) = self.steers else { return };
        for parts in steers.take() {
            self.show_steer(&parts);
            conversation.push(Message::User { parts });
        }
    }

    /// Shows a steering message's text as the user's.
    fn show_steer(&self, parts: &[UserPart]) {
        let message_id: Arc<str> = Arc::from(format!("steer_{}", uuid::Uuid::new_v4().simple()));
        for part in parts {
            if let UserPart::Text { text } = part {
                let (message_id, text) = (Arc::clone(&message_id), text.clone());
                self.events.emit(AgentEvent::UserText { message_id, text });
            }
        }
    }

    /// Runs the calls one after another, appending each result. After a
    /// cancel, the calls that did not run get a "cancelled" result. A call
    /// whose arguments were over the cap is not run (see [`Self::too_big`]).
    async fn run_tools(
        &self,
        conversation: &mut Conversation,
        calls: &[ToolCallRequest],
        oversized: &[OversizedCall],
        from_text: bool,
        hooks: &TurnHooks,
    ) -> Flow {
        let mut index = 0;
        while index < calls.len() {
            let call = &calls[index];
            let too_big = oversized.iter().find(|o| o.index == index);
            // Consecutive `task` calls run together (see `task`).
            let tasks = (index..calls.len())
                .take_while(|&n| calls[n].name == Tool::Task.name() && !oversized.iter().any(|o| o.index == n))
                .count();
            if tasks > 0 && !self.cancel.is_cancelled() {
                let batch = &calls[index..index + tasks];
                let flow = self.run_tasks(conversation, batch).await;
                index += tasks;
                if flow == Flow::Cancelled {
                    for rest in &calls[index..] {
                        self.finish_call(&rest.id, ToolOutcome::cancelled());
                        conversation.push(self.tool_result(rest, CANCELLED_RESULT.to_owned()));
                    }
                    return Flow::Cancelled;
                }
                continue;
            }
            let (result, flow) = if self.cancel.is_cancelled() {
                self.finish_call(&call.id, ToolOutcome::cancelled());
                (CANCELLED_RESULT.to_owned(), Flow::Cancelled)
            } else if let Some(too_big) = too_big {
                (self.too_big(call, too_big.bytes), Flow::Continue)
            } else {
                self.run_tool(call, from_text, conversation.plan_tools, hooks).await
            };
            conversation.push(self.tool_result(call, result));
            let (rest_outcome, rest_result) = match flow {
                Flow::Continue => {
                    index += 1;
                    continue;
                }
                Flow::Cancelled => (ToolOutcome::cancelled(), CANCELLED_RESULT.to_owned()),
                Flow::Stopped => {
                    let message = "Not run: a hook stopped the turn.".to_owned();
                    (ToolOutcome::failed(message.clone()), message)
                }
            };
            for rest in &calls[index + 1..] {
                self.finish_call(&rest.id, rest_outcome.clone());
                conversation.push(self.tool_result(rest, rest_result.clone()));
            }
            return flow;
        }
        Flow::Continue
    }

    /// The session's hooks for this prompt, then its `SessionStart` (at the
    /// session's first prompt) and `UserPromptSubmit` hooks: the prompt to
    /// send (with what they add for the model), or that a hook blocked it
    /// (the user is told why). `Err` when cancelled, with the prompt.
    async fn prompt_hooks(&self, mut user: Vec<UserPart>) -> Result<Prompted, (Cancelled, Vec<UserPart>)> {
        let Some(session_hooks) = self.hooks else { return Ok(Prompted::Go(TurnHooks::none(), user)) };
        let hooks = match session_hooks.for_turn(self.workspace.approver, self.events, self.cancel).await {
            Ok(hooks) => hooks,
            Err(Cancelled) => return Err((Cancelled, user)),
        };
        let mut context = Vec::new();
        if hooks.first {
            let source = hooks.source();
            let mut fields = serde_json::Map::new();
            fields.insert("source".to_owned(), serde_json::json!(source));
            fields.insert("model".to_owned(), serde_json::json!(self.client.model().model));
            let names = [source.to_owned()];
            let answers = match self.run_hooks(&hooks, HookEvent::SessionStart, &names, fields).await {
                Ok(answers) => answers,
                Err(Cancelled) => return Err((Cancelled, user)),
            };
            self.hook_notice(HookEvent::SessionStart, &answers);
            context.extend(answers.context);
        }
        let prompt: Vec<&str> = user
            .iter()
            .filter_map(|part| match part {
                UserPart::Text { text } => Some(text.as_str()),
                UserPart::Image { .. } => None,
            })
            .collect();
        let mut fields = serde_json::Map::new();
        fields.insert("prompt".to_owned(), serde_json::json!(prompt.join("\n")));
        let answers = match self.run_hooks(&hooks, HookEvent::UserPromptSubmit, &[], fields).await {
            Ok(answers) => answers,
            Err(Cancelled) => return Err((Cancelled, user)),
        };
        if let Some(reason) = answers.block_reason().or_else(|| answers.stop.clone()) {
            let text = format!("The prompt was not sent to the model: {}", shown(&reason, Lines::Many));
            self.events.emit(AgentEvent::Notice { title: "A hook blocked this prompt".to_owned(), text });
            return Ok(Prompted::Blocked);
        }
        self.hook_notice(HookEvent::UserPromptSubmit, &answers);
        context.extend(answers.context);
        if !context.is_empty() {
            let text = format!("[Context from the user's hooks]\n{}", context.join("\n\n"));
            user.push(UserPart::Text { text });
        }
        Ok(Prompted::Go(hooks, user))
    }

    /// The `Stop` hooks once the model is done: why it should go on, if a
    /// hook says so (`None`: the turn ends).
    async fn stop_hooks(&self, hooks: &TurnHooks, answer: &str, active: bool) -> Result<Option<String>, Cancelled> {
        if !hooks.any(HookEvent::Stop, &[]) {
            return Ok(None);
        }
        let mut fields = serde_json::Map::new();
        fields.insert("stop_hook_active".to_owned(), serde_json::json!(active));
        fields.insert("last_assistant_message".to_owned(), serde_json::json!(answer));
        let answers = self.run_hooks(hooks, HookEvent::Stop, &[], fields).await?;
        self.hook_notice(HookEvent::Stop, &answers);
        if answers.stop.is_some() {
            return Ok(None);
        }
        Ok(answers.block_reason())
    }

    /// Runs the hooks of `event` matching `names` with the session's mode
    /// and its launcher (the one commands are started by).
    async fn run_hooks(
        &self,
        hooks: &TurnHooks,
        event: HookEvent,
        names: &[String],
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Answers, Cancelled> {
        let mode = crate::hooks::permission_mode(lock(self.workspace.policy).mode());
        hooks.run(event, names, mode, fields, self.workspace.host.launcher(), self.cancel).await
    }

    /// What hooks outside a tool call said, as a notice (a run with
    /// nothing to say is not shown).
    fn hook_notice(&self, event: HookEvent, answers: &Answers) {
        let said: Vec<&str> = answers.notes.iter().map(String::as_str).filter(|note| !note.ends_with(": ok")).collect();
        if said.is_empty() {
            return;
        }
        let title = format!("{} hook", event.name());
        let text = format!("What the {} hooks said:\n{}", event.name(), said.join("\n"));
        self.events.emit(AgentEvent::Notice { title, text });
    }

    /// Writes down an answer that outlasts the session; says so when it
    /// cannot (it then holds for the session only).
    async fn keep(&self, remembered: crate::permission::Remembered) {
        let Some(rules) = self.rules.cloned() else { return };
        let kept = tokio::task::spawn_blocking(move || rules.keep(&remembered)).await;
        let failed = match kept {
            Ok(Ok(())) => return,
            Ok(Err(err)) => err.to_string(),
            Err(err) => err.to_string(),
        };
        self.events.emit(AgentEvent::Notice {
            title: "A rule was not kept".to_owned(),
            text: format!("A rule was not kept: it holds in this session only ({}).", shown(&failed, Lines::One)),
        });
    }

    /// The tools the session has (before the model's profile and refusals).
    /// With `plan`, `exit_plan_mode` after the rest ([`Conversation::plan_tools`]).
    fn offered(&self, plan: bool) -> Offered<'_> {
        let offered = match self.external {
            Some(external) => Offered::WithExternal(external.definitions()),
            None => Offered::Builtin(self.tools),
        };
        if !plan {
            return offered;
        }
        let mut tools = offered.to_vec();
        tools.push(tools::plan_definition(crate::config::PromptProfile::Standard).clone());
        Offered::WithPlan(tools)
    }

    /// The size of the next request, in tokens (see [`estimate_tokens`]).
    fn estimate(&self, conversation: &Conversation) -> u64 {
        let offered = self.offered(conversation.plan_tools);
        let request = Request::new(self.client, &conversation.system_prompt, &offered, self.agents);
        estimate_tokens(conversation, request.system_prompt, &request.tools)
    }

    /// Parses and describes a call: a built-in tool's, else an external
    /// tool's. The error is a message for the model.
    fn prepare(&self, call: &ToolCallRequest, plan: bool) -> Result<(Runnable<'_>, ToolKind, Description), String> {
        // A built-in the configuration leaves out (`[tools] fetch = false`),
        // or `exit_plan_mode` before plan mode, is no tool at all.
        if Tool::from_name(&call.name).is_some() {
            let offered = self.offered(plan);
            if !offered.iter().any(|definition| definition.name() == call.name) {
                let known: Vec<&str> = offered.iter().map(ToolDefinition::name).collect();
                return Err(format!(
                    "There is no tool named \"{}\". Available tools: {}.",
                    call.name,
                    known.join(", ")
                ));
            }
        }
        if Tool::from_name(&call.name).is_none()
            && let Some(external) = self.external
        {
            return match external.prepare(&call.name, &call.arguments) {
                Some(Ok(prepared)) => {
                    let (kind, description) = (prepared.kind, prepared.description.clone());
                    Ok((Runnable::External(external, prepared), kind, description))
                }
                Some(Err(message)) => Err(message),
                None => {
                    let offered = self.offered(plan);
                    let known: Vec<&str> = offered.iter().map(ToolDefinition::name).collect();
                    Err(format!("There is no tool named \"{}\". Available tools: {}.", call.name, known.join(", ")))
                }
            };
        }
        let in_place = self.workspace.host.writes_in_place();
        let prepared = tools::prepare_in(&call.name, &call.arguments, self.workspace.cwd, in_place)?;
        let (kind, description) = (prepared.tool.kind(), prepared.description.clone());
        Ok((Runnable::Builtin(prepared), kind, description))
    }

    /// A call whose arguments passed `max_tool_call_bytes`: their bytes were
    /// dropped as they streamed (never kept whole, echoed to the editor or
    /// logged), so it fails, telling the model the limit and what to do.
    fn too_big(&self, call: &ToolCallRequest, bytes: usize) -> String {
        let limit = self.settings.max_tool_call_bytes;
        let message = format!(
            "Not run: the arguments of this {} call were {bytes} bytes, over the limit of {limit} bytes for one tool \
             call, so lathe dropped them. Split the work into several calls under the limit: write a large file in \
             parts (write_file with the first part, then edit_file calls that add the rest), or generate large or \
             repetitive content with a short script run by the shell tool.",
            call.name
        );
        self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
        message
    }

    /// The permission step: the policy's verdict on what the call touches,
    /// the `PreToolUse` hooks (unless the policy refuses the call), and the
    /// user's answer when the policy (or a hook) asks. A hook's "allow"
    /// skips the mode's question, never a refusal, never the question about
    /// leaving the sandbox, about a call read from text or about a cautioned
    /// call (`Policy::caution`: asked every time). Before asking, a built-in call's refusals that do not depend on
    /// the answer are decided ([`tools::precheck`]): such a call is refused
    /// and nothing is asked. A call read from the model's text (`from_text`)
    /// asks in every mode but `full-auto`, whatever was allowed before, and
    /// says where it came from. `Err` carries the result for the model (and
    /// the flow) of a call that will not run; the call is already reported
    /// finished then.
    async fn permit(
        &self,
        asked: Asked<'_>,
        runnable: &Runnable<'_>,
        context: &ToolContext<'_>,
        hooks: &TurnHooks,
    ) -> Result<Permit, (String, Flow)> {
        let Asked { call, kind, description, raw_input, from_text } = asked;
        let workspace = &self.workspace;
        let (verdict, mode) = {
            let policy = lock(workspace.policy);
            (policy.judge(&description.access, workspace.roots), policy.mode())
        };
        // A call read from text may be the model quoting a file or a page.
        let verdict = match verdict {
            Verdict::Allow if from_text && mode != Mode::FullAuto => Verdict::Ask,
            other => other,
        };
        let mut permit = Permit { approved: false, answered: None, notes: Vec::new(), context: None };
        if let Verdict::Deny(reason) = verdict {
            self.finish_call(&call.id, ToolOutcome::failed(reason.clone()));
            return Err((reason, Flow::Continue));
        }
        let mut verdict = verdict;
        let names = crate::hooks::tool_names(&call.name);
        if hooks.any(HookEvent::PreToolUse, &names) {
            let fields = tool_fields(call, raw_input.as_ref(), &description.access);
            let answers = match self.run_hooks(hooks, HookEvent::PreToolUse, &names, fields).await {
                Ok(answers) => answers,
                Err(Cancelled) => {
                    self.finish_call(&call.id, ToolOutcome::cancelled());
                    return Err((CANCELLED_RESULT.to_owned(), Flow::Cancelled));
                }
            };
            permit.notes = answers.notes.clone();
            self.show_notes(&call.id, &permit.notes);
            if let Some(reason) = &answers.stop {
                let message = format!("Not run: a hook stopped the turn ({reason}).");
                // What a hook said is shown escaped; the model reads it as it is.
                let shown_message = shown(&message, Lines::Many).into_owned();
                self.finish_noted(&call.id, ToolOutcome::failed(shown_message), &permit.notes);
                self.events.emit(AgentEvent::Notice {
                    title: "A hook stopped the turn".to_owned(),
                    text: format!("A hook stopped the turn: {}", shown(reason, Lines::Many)),
                });
                return Err((message, Flow::Stopped));
            }
            if let Some(reason) = answers.block_reason() {
                let message = format!("Not run: a PreToolUse hook blocked this call: {reason}");
                let shown_message = shown(&message, Lines::Many).into_owned();
                self.finish_noted(&call.id, ToolOutcome::failed(shown_message), &permit.notes);
                return Err((message, Flow::Continue));
            }
            permit.context = answers.context_text();
            // A hook's allow skips the mode's question only: not a request
            // to leave the sandbox, not a call read from the model's text,
            // not a cautioned call (asked every time: `Policy::caution`).
            let must_ask = {
                let policy = lock(workspace.policy);
                let access = &description.access;
                from_text || policy.leaves_sandbox(access) || policy.caution(access, workspace.roots).is_some()
            };
            verdict = match (verdict, answers.decision) {
                (Verdict::Allow, Some(HookDecision::Ask)) => Verdict::Ask,
                (Verdict::Ask, Some(HookDecision::Allow)) if !must_ask => Verdict::Allow,
                (verdict, _) => verdict,
            };
        }
        if verdict != Verdict::Ask {
            return Ok(permit);
        }
        if let Runnable::Builtin(prepared) = runnable
            && let Some(refusal) = tools::precheck(prepared, context).await
        {
            let (for_model, flow) = match refusal.status {
                OutcomeStatus::Cancelled => (CANCELLED_RESULT.to_owned(), Flow::Cancelled),
                OutcomeStatus::Completed | OutcomeStatus::Failed => (refusal.for_model.clone(), Flow::Continue),
            };
            self.finish_noted(&call.id, refusal, &permit.notes);
            return Err((for_model, flow));
        }
        let (mut choices, caution) = {
            let policy = lock(workspace.policy);
            let access = &description.access;
            (policy.options(access, workspace.roots), policy.caution(access, workspace.roots))
        };
        // Why this asks whatever was remembered, said first.
        let (mut title, mut preview) = match caution {
            Some(why) => {
                let mut preview = vec![DisplayContent::Text(format!("**Asked every time:** {why}."))];
                preview.extend(description.preview.iter().cloned());
                (format!("{} — {why}", description.title), preview)
            }
            None => (description.title.clone(), description.preview.clone()),
        };
        if from_text {
            // Nothing to remember, either way: the next such call asks again
            // (no rule allows it, and none is made from it).
            choices.retain(|choice| !matches!(choice.answer, Answer::AllowAlways(_) | Answer::RejectAlways(_)));
            title.push_str(" (read from the model's text)");
            preview.insert(0, DisplayContent::Text(FROM_TEXT_NOTE.to_owned()));
        }
        let question = PermissionQuestion {
            call_id: call.id.clone(),
            title,
            kind,
            locations: description.locations.clone(),
            preview,
            raw_input,
            choices,
            parent_call_id: None,
        };
        let answer = match workspace.approver.ask(&question).or_cancel(self.cancel).await {
            Err(Cancelled) => Answer::Cancelled,
            Ok(Ok(answer)) => answer,
            Ok(Err(err)) => {
                let message = format!("Not run: the editor could not ask the user for permission ({err}).");
                self.finish_noted(&call.id, ToolOutcome::failed(message.clone()), &permit.notes);
                return Err((message, Flow::Continue));
            }
        };
        let kept = lock(workspace.policy).remember(&description.access, workspace.roots, answer);
        if let Some(kept) = kept {
            self.keep(kept).await;
        }
        match answer {
            Answer::AllowOnce | Answer::AllowAlways(_) | Answer::AllowOutside => {
                permit.approved = true;
                permit.answered = Some(answer);
                Ok(permit)
            }
            Answer::RejectOnce | Answer::RejectAlways(_) => {
                let message = "The user declined this tool call. Do not retry it as is; \
                               ask the user how to proceed or take another approach."
                    .to_owned();
                self.finish_noted(&call.id, ToolOutcome::failed("Declined by the user."), &permit.notes);
                Err((message, Flow::Continue))
            }
            Answer::Cancelled => {
                self.finish_noted(&call.id, ToolOutcome::cancelled(), &permit.notes);
                Err((CANCELLED_RESULT.to_owned(), Flow::Cancelled))
            }
        }
    }

    /// The `PostToolUse` hooks of a call that completed: what they said is
    /// added to the call's notes and what they give the model to its
    /// result; the flow after them.
    async fn post_tool_use(
        &self,
        call: &ToolCallRequest,
        (raw_input, access): (Option<&serde_json::Value>, &Access),
        (outcome, for_model, notes): (&ToolOutcome, &mut String, &mut Vec<String>),
        hooks: &TurnHooks,
    ) -> Flow {
        let names = crate::hooks::tool_names(&call.name);
        if outcome.status != OutcomeStatus::Completed || !hooks.any(HookEvent::PostToolUse, &names) {
            return Flow::Continue;
        }
        let mut fields = tool_fields(call, raw_input, access);
        let mut response = serde_json::Map::new();
        response.insert("success".to_owned(), serde_json::json!(true));
        response.insert("output".to_owned(), serde_json::json!(outcome.for_model));
        if let Some(path) = target_path(access) {
            response.insert("filePath".to_owned(), serde_json::json!(path));
        }
        fields.insert("tool_response".to_owned(), serde_json::Value::Object(response));
        let answers = match self.run_hooks(hooks, HookEvent::PostToolUse, &names, fields).await {
            Ok(answers) => answers,
            Err(Cancelled) => {
                notes.push("PostToolUse hooks: cancelled".to_owned());
                return Flow::Cancelled;
            }
        };
        notes.extend(answers.notes.iter().cloned());
        if let Some(context) = answers.context_text() {
            for_model.push_str(&format!("\n\n[What the user's PostToolUse hooks said after this call]\n{context}"));
        }
        match answers.stop {
            Some(reason) => {
                self.events.emit(AgentEvent::Notice {
                    title: "A hook stopped the turn".to_owned(),
                    text: shown(&reason, Lines::Many).into_owned(),
                });
                Flow::Stopped
            }
            None => Flow::Continue,
        }
    }

    /// Shows hook notes on a call while it waits or runs.
    fn show_notes(&self, id: &str, notes: &[String]) {
        if notes.is_empty() {
            return;
        }
        let content = vec![DisplayContent::Text(notes.join("\n"))];
        self.update(id, ToolCallChange { content: Some(content), ..ToolCallChange::default() });
    }

    /// The final update of a call, its hooks' notes after its own content.
    fn finish_noted(&self, id: &str, mut outcome: ToolOutcome, notes: &[String]) {
        if !notes.is_empty() {
            outcome.content.push(DisplayContent::Text(notes.join("\n")));
        }
        self.finish_call(id, outcome);
    }

    /// One call: describe it, judge it, maybe ask, run it, report it.
    /// `from_text`: the call was read from the model's answer text; `plan`:
    /// `exit_plan_mode` is among the tools (see [`Conversation::plan_tools`]).
    /// Returns the result for the model.
    async fn run_tool(&self, call: &ToolCallRequest, from_text: bool, plan: bool, hooks: &TurnHooks) -> (String, Flow) {
        let workspace = &self.workspace;
        let raw_input = serde_json::from_str::<serde_json::Value>(&call.arguments).ok();
        let (mut runnable, kind, description) = match self.prepare(call, plan) {
            Ok(prepared) => prepared,
            Err(message) => {
                // Show what the model sent, then why it cannot run.
                self.update(&call.id, ToolCallChange { raw_input, ..ToolCallChange::default() });
                self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
                return (message, Flow::Continue);
            }
        };
        self.update(
            &call.id,
            ToolCallChange {
                title: Some(description.title.clone()),
                kind: Some(kind),
                locations: Some(description.locations.clone()),
                raw_input: raw_input.clone(),
                ..ToolCallChange::default()
            },
        );
        if let Runnable::Builtin(prepared) = &runnable
            && let Some(interaction) = prepared.interaction()
        {
            return self.interact(call, interaction, &description).await;
        }
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
            seen: workspace.seen,
        };
        let asked = Asked { call, kind, description: &description, raw_input: raw_input.clone(), from_text };
        let Permit { approved, answered, mut notes, context: hook_context } =
            match self.permit(asked, &runnable, &context, hooks).await {
                Ok(permit) => permit,
                Err(refused) => return refused,
            };
        if let (Runnable::Builtin(prepared), Access::Fetch { .. }) = (&mut runnable, &description.access) {
            let remembered = lock(workspace.policy).fetch_hosts();
            prepared.set_host_trust(HostTrust { remembered, approved });
        }
        if let (Runnable::Builtin(prepared), Access::Execute { .. }) = (&mut runnable, &description.access) {
            prepared.set_sandboxed(lock(workspace.policy).runs_sandboxed(&description.access, answered));
        }
        self.update(&call.id, ToolCallChange { status: Some(ToolCallStatus::InProgress), ..ToolCallChange::default() });
        let grace = match &runnable {
            Runnable::Builtin(prepared) => prepared.cancel_grace(workspace.host),
            Runnable::External(..) => tools::CANCEL_GRACE,
        };
        // A command may change any file: what watches the roots looks before and after.
        let watch = match &description.access {
            Access::Execute { .. } => workspace.host.command_watch(),
            _ => None,
        };
        if let Some(watch) = watch {
            watch.before_command().await;
        }
        let running = async {
            match runnable {
                Runnable::Builtin(prepared) => tools::run(prepared, &context).await,
                Runnable::External(external, prepared) => external.run(prepared, &context).await,
            }
        };
        tokio::pin!(running);
        let outcome = match (&mut running).or_cancel(self.cancel).await {
            Ok(outcome) => outcome,
            // The tool sees the same token; give it a moment to wind down
            // (or to finish a write it had started).
            Err(Cancelled) => {
                tokio::time::timeout(grace, &mut running).await.unwrap_or_else(|_| ToolOutcome::cancelled())
            }
        };
        if let Some(watch) = watch {
            watch.after_command().await;
        }
        let mut flow = if outcome.status == OutcomeStatus::Cancelled || self.cancel.is_cancelled() {
            Flow::Cancelled
        } else {
            Flow::Continue
        };
        // A call that finished although the turn was cancelled (a write
        // that had started) reports what it did: the turn still stops.
        let mut for_model = match outcome.status {
            OutcomeStatus::Cancelled => CANCELLED_RESULT.to_owned(),
            OutcomeStatus::Completed | OutcomeStatus::Failed => outcome.for_model.clone(),
        };
        if let Some(said) = hook_context {
            for_model.push_str(&format!("\n\n[What the user's PreToolUse hooks said about this call]\n{said}"));
        }
        if flow == Flow::Continue {
            let access = &description.access;
            let noted = (&outcome, &mut for_model, &mut notes);
            flow = self.post_tool_use(call, (raw_input.as_ref(), access), noted, hooks).await;
        }
        self.finish_noted(&call.id, outcome, &notes);
        (for_model, flow)
    }

    /// A call the turn answers by asking the user: the model's question
    /// (`ask_user`), or whether to run the plan (`exit_plan_mode`, which
    /// switches the mode when the user says yes, and the turn goes on). The
    /// answer is the call's result; a cancel ends the wait like any other.
    async fn interact(
        &self,
        call: &ToolCallRequest,
        interaction: Interaction,
        description: &Description,
    ) -> (String, Flow) {
        let question = match interaction {
            Interaction::Ask(args) => {
                if args.question.trim().is_empty() {
                    let message = "Not asked: the question is empty.".to_owned();
                    self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
                    return (message, Flow::Continue);
                }
                let choices = args
                    .choices
                    .iter()
                    .filter(|label| !label.trim().is_empty())
                    .enumerate()
                    .map(|(n, label)| UserChoice {
                        id: format!("choice_{}", n + 1),
                        label: label.clone(),
                        declines: false,
                    })
                    .collect::<Vec<_>>();
                UserQuestion {
                    call_id: call.id.clone(),
                    title: description.title.clone(),
                    question: args.question,
                    free_text: args.free_text || choices.is_empty(),
                    choices,
                    approval: false,
                    preview: Vec::new(),
                }
            }
            Interaction::ExitPlan(plan) => {
                if self.mode() != Mode::Plan {
                    let message = "Not asked: the session is not in plan mode, so there is no plan to approve. Go on \
                                   with the task."
                        .to_owned();
                    self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
                    return (message, Flow::Continue);
                }
                self.events.emit(AgentEvent::PlanDocument { markdown: plan.clone() });
                let run = |mode: Mode, label: &str| UserChoice {
                    id: format!("run_{}", mode.id()),
                    label: label.to_owned(),
                    declines: false,
                };
                UserQuestion {
                    call_id: call.id.clone(),
                    title: description.title.clone(),
                    question: "Run this plan?".to_owned(),
                    choices: vec![
                        run(Mode::Ask, "Yes, and ask before each change"),
                        run(Mode::AcceptEdits, "Yes, and accept edits"),
                        run(Mode::Auto, "Yes, in auto mode"),
                        UserChoice {
                            id: KEEP_PLANNING.to_owned(),
                            label: "No, keep planning".to_owned(),
                            declines: true,
                        },
                    ],
                    free_text: false,
                    approval: true,
                    preview: description.preview.clone(),
                }
            }
        };
        self.update(&call.id, ToolCallChange { status: Some(ToolCallStatus::InProgress), ..ToolCallChange::default() });
        let reply = match self.workspace.approver.ask_user(&question).or_cancel(self.cancel).await {
            Err(Cancelled) | Ok(Ok(UserReply::Cancelled)) => {
                self.finish_call(&call.id, ToolOutcome::cancelled());
                return (CANCELLED_RESULT.to_owned(), Flow::Cancelled);
            }
            Ok(Ok(reply)) => reply,
            Ok(Err(AskError::NoOneToAsk(why))) => {
                let message = if question.approval {
                    format!(
                        "No one can approve the plan here ({why}). The session stays in plan mode: end your turn with \
                         the plan as your answer."
                    )
                } else {
                    format!("No one to ask ({why}). Decide yourself, and say what you assumed.")
                };
                self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
                return (message, Flow::Continue);
            }
            Ok(Err(AskError::Failed(why))) => {
                let message = format!("Not asked: {why}.");
                self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
                return (message, Flow::Continue);
            }
        };
        let label = |id: &str| question.choices.iter().find(|c| c.id == id).map(|c| c.label.clone());
        let (for_model, shown) = match (&reply, question.approval) {
            (UserReply::Chose(id), true) => match Mode::ALL.into_iter().find(|mode| *id == format!("run_{}", mode.id()))
            {
                Some(mode) => {
                    lock(self.workspace.policy).set_mode(mode);
                    self.events.emit(AgentEvent::ModeChanged(mode));
                    (
                        format!(
                            "The user approved the plan, and the session is now in {} mode. Carry out the plan now.",
                            mode.id()
                        ),
                        format!("Approved: running in {} mode.", mode.name()),
                    )
                }
                None => (
                    "The user wants to keep planning. Ask what to change, or refine the plan and call exit_plan_mode \
                     again."
                        .to_owned(),
                    "Keep planning.".to_owned(),
                ),
            },
            (UserReply::Chose(id), false) => match label(id) {
                Some(choice) => (format!("The user chose: {choice}"), format!("Answer: {choice}")),
                None => (format!("The user chose an answer that was not offered ({id})."), format!("Answer: {id}")),
            },
            (UserReply::Wrote(text), _) => (format!("The user answered: {text}"), format!("Answer: {text}")),
            (UserReply::Declined, true) => (
                "The user did not approve the plan. Ask what to change, or refine it and call exit_plan_mode again."
                    .to_owned(),
                "Not approved.".to_owned(),
            ),
            (UserReply::Declined, false) => {
                ("The user declined to answer.".to_owned(), "The user declined to answer.".to_owned())
            }
            (UserReply::Cancelled, _) => (CANCELLED_RESULT.to_owned(), "Cancelled.".to_owned()),
        };
        let mut outcome = ToolOutcome::completed(for_model.clone());
        outcome.content = vec![DisplayContent::Text(shown)];
        self.finish_call(&call.id, outcome);
        (for_model, Flow::Continue)
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

    /// Opens the response stream (see [`open_retrying`]). Tells the user,
    /// once per session, when the model turns out to take no tools.
    async fn open_stream(&self, conversation: &mut Conversation) -> Result<ResponseStream, Sample> {
        let offered = self.offered(conversation.plan_tools);
        let request = Request::new(self.client, &conversation.system_prompt, &offered, self.agents);
        let opened = open_retrying(self.client, self.events, self.cancel, (&request, conversation.messages())).await;
        if let Some(reason) = self.client.chat_only()
            && !offered.is_empty()
            && !conversation.told_chat_only
        {
            conversation.told_chat_only = true;
            let title = "This model takes no tools".to_owned();
            self.events.emit(AgentEvent::Notice { title, text: chat_only_notice(reason) });
        }
        opened.map_err(|failure| match failure {
            NotOpened::Cancelled => Sample::Cancelled(None),
            NotOpened::Failed(error) => Sample::Failed(error, None),
        })
    }

    /// One model request, streamed to the user as it arrives.
    async fn sample(&self, conversation: &mut Conversation) -> Sample {
        let request_id = uuid::Uuid::new_v4().simple().to_string();
        let message_id: Arc<str> = Arc::from(format!("msg_{request_id}"));
        let thought_id: Arc<str> = Arc::from(format!("thought_{request_id}"));
        let mut stream = match self.open_stream(conversation).await {
            Ok(stream) => stream,
            Err(ended) => return ended,
        };
        // The tools this request actually offered: a call written as text may name only these.
        let offered = self.offered(conversation.plan_tools);
        let sent: &[ToolDefinition] = if self.client.chat_only().is_some() { &[] } else { &offered };
        // Calls written as text are read only from a server that needs it.
        let model = self.client.model();
        let recover = match model.text_tool_calls {
            TextToolCalls::Auto => !conversation.native_tool_calls.contains(&model.key),
            TextToolCalls::On => true,
            TextToolCalls::Off => false,
        };
        let mut decoder = StreamDecoder::new(format!("call_{}_", &request_id[..12]))
            .offering(sent.iter().map(ToolDefinition::name))
            .recovering_text_calls(recover)
            .max_argument_bytes(self.settings.max_tool_call_bytes);
        // Calls shown to the user while streaming: the decoder's position of
        // each, and the session-unique id it was shown with. By position, not
        // by the server's id: a server may give two calls the same id.
        let mut announced: Vec<(usize, String)> = Vec::new();
        let used_ids = &mut conversation.tool_call_ids;
        let events = self.events;
        let external = self.external;
        let mut forward = |event: ModelEvent| match event {
            ModelEvent::Text(text) => events.emit(AgentEvent::AgentText { message_id: message_id.clone(), text }),
            ModelEvent::Reasoning(text) => {
                events.emit(AgentEvent::AgentThought { message_id: thought_id.clone(), text })
            }
            ModelEvent::ToolCallStarted { position, id, name } => {
                let unique = unique_id(used_ids, &id);
                let (title, kind) = match Tool::from_name(&name) {
                    Some(tool) => (pending_title(tool).to_owned(), tool.kind()),
                    None => external
                        .and_then(|external| external.pending(&name))
                        .unwrap_or_else(|| (name.clone(), ToolKind::Other)),
                };
                events.emit(AgentEvent::ToolCallStarted { id: unique.clone(), title, kind, name });
                announced.push((position, unique));
            }
        };
        let ended = loop {
            let Ok(item) = stream.next().or_cancel(self.cancel).await else {
                break Sample::Cancelled(Some(decoder));
            };
            match item {
                None => {
                    decoder.end(&mut forward);
                    break Sample::Done(decoder.finish());
                }
                Some(Ok(chunk)) => {
                    if let Err(reported) = decoder.push(chunk, &mut forward) {
                        break Sample::Failed(ModelError::Provider(reported.0).into(), Some(decoder));
                    }
                }
                Some(Err(error)) => break Sample::Failed(error.into(), Some(decoder)),
            }
        };
        match ended {
            Sample::Done(mut output) => {
                if output.text_tool_calls.is_none() && !output.tool_calls.is_empty() {
                    // This server parses calls itself.
                    conversation.native_tool_calls.insert(model.key.clone());
                }
                // The decoder announces a call when its name arrives and keeps
                // exactly the named calls, in position order: the n-th call
                // is the n-th announced, by position.
                announced.sort_by_key(|(position, _)| *position);
                let mut shown = announced.into_iter().map(|(_, unique)| unique);
                for call in &mut output.tool_calls {
                    call.id = match shown.next() {
                        Some(unique) => unique,
                        None => {
                            let unique = unique_id(&mut conversation.tool_call_ids, &call.id);
                            let started = AgentEvent::ToolCallStarted {
                                id: unique.clone(),
                                title: call.name.clone(),
                                kind: ToolKind::Other,
                                name: call.name.clone(),
                            };
                            self.events.emit(started);
                            unique
                        }
                    };
                }
                for unmatched in shown {
                    self.finish_call(&unmatched, ToolOutcome::failed("Not run: the model's response lost this call."));
                }
                Sample::Done(output)
            }
            interrupted => {
                // Calls the user saw start but that will never run.
                for (_, id) in &announced {
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

/// What the user would be asked about.
struct Asked<'a> {
    call: &'a ToolCallRequest,
    kind: ToolKind,
    description: &'a Description,
    raw_input: Option<serde_json::Value>,
    /// The call was read from the model's answer text.
    from_text: bool,
}

/// What a question about a call read from the model's text says first.
const FROM_TEXT_NOTE: &str = "lathe read this call from the model's answer text; the server did not send it as a \
tool call. Either the server has no tool-call parser for this model, or the model is quoting a call it read in a \
file or a page. Allow it only if you expect this call.";

/// The choice of `exit_plan_mode`'s question that keeps the session in plan mode.
const KEEP_PLANNING: &str = "keep_planning";

/// A call the permission step let through.
struct Permit {
    /// The user said yes to this very call (not merely a standing rule).
    approved: bool,
    /// The user's answer, when they were asked.
    answered: Option<Answer>,
    /// What its `PreToolUse` hooks said (shown on the call).
    notes: Vec<String>,
    /// What they gave the model.
    context: Option<String>,
}

/// What a prompt's hooks decided.
enum Prompted {
    /// Send it (with what the hooks added), and run these hooks for the turn.
    Go(TurnHooks, Vec<UserPart>),
    /// A hook blocked it; the user was told.
    Blocked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Cancelled,
    /// A hook stopped the turn (`continue: false`): it ends, not cancelled.
    Stopped,
}

/// The fields of a tool call's hook input: its name, its input (the
/// model's arguments, with `file_path` added for a file tool as Claude
/// Code's have it), its id.
fn tool_fields(
    call: &ToolCallRequest,
    raw_input: Option<&serde_json::Value>,
    access: &Access,
) -> serde_json::Map<String, serde_json::Value> {
    let mut input = match raw_input {
        Some(serde_json::Value::Object(input)) => input.clone(),
        _ => serde_json::Map::new(),
    };
    if let Some(path) = target_path(access)
        && !input.contains_key("file_path")
    {
        input.insert("file_path".to_owned(), serde_json::json!(path));
    }
    let mut fields = serde_json::Map::new();
    fields.insert("tool_name".to_owned(), serde_json::json!(call.name));
    fields.insert("tool_input".to_owned(), serde_json::Value::Object(input));
    fields.insert("tool_use_id".to_owned(), serde_json::json!(call.id));
    fields
}

/// The file a file tool's call touches (its real path), if it is one.
fn target_path(access: &Access) -> Option<String> {
    match access {
        Access::Read(targets) | Access::Write(targets) if targets.len() == 1 => {
            targets.first().map(|target| target.real.display().to_string())
        }
        _ => None,
    }
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
        Tool::Fetch => "Fetch",
        Tool::AskUser => "Ask the user",
        Tool::ExitPlanMode => "Plan ready",
        Tool::Task => "Sub-agent",
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

/// How a compaction went.
#[derive(Debug)]
pub enum Compaction {
    /// Too little history to summarise.
    NothingToDo,
    /// The older history was replaced by a summary; the current turn's user
    /// message now sits at `turn_start`.
    Done {
        /// Where the current turn now starts.
        turn_start: usize,
    },
    /// The user cancelled while it ran; the conversation is unchanged.
    Cancelled,
    /// The summary request failed (after the retries a retry could fix);
    /// the conversation is unchanged.
    Failed(TurnError),
}

const COMPACT_PROMPT: &str = include_str!("../prompts/compact.md");

/// The tail kept verbatim by a compaction, at most this share of the window.
const KEPT_TAIL_SHARE: u64 = 4;

impl Turn<'_> {
    fn tool_result(&self, call: &ToolCallRequest, content: String) -> Message {
        Message::Tool {
            tool_call_id: call.id.clone(),
            content: trim_middle(content, self.context.max_tool_output_bytes),
        }
    }

    /// Whether the next request would cross the compaction threshold.
    fn needs_compaction(&self, conversation: &Conversation) -> bool {
        let window = self.client.context_window();
        let limit = (window as f64 * self.context.compact_threshold) as u64;
        self.estimate(conversation) > limit
    }

    /// See [`Compactor::compact`].
    pub async fn compact(&self, conversation: &mut Conversation, turn_start: Option<usize>) -> Compaction {
        let tools = self.offered(conversation.plan_tools);
        let compactor = Compactor {
            client: self.client,
            events: self.events,
            cancel: self.cancel,
            tools: &tools,
            agents: self.agents,
        };
        compactor.compact(conversation, turn_start).await
    }
}

/// What summarising the history needs: a model, somewhere to say so, and the
/// turn's token. No tools run.
pub struct Compactor<'a> {
    /// The model that writes the summary.
    pub client: &'a ModelClient,
    /// Where the "summarising…" line goes.
    pub events: &'a dyn EventSink,
    /// Cancels the summary request.
    pub cancel: &'a CancellationToken,
    /// The tools the conversation was held with (sent again so the request
    /// shares the usual prefix and its cache).
    pub tools: &'a [ToolDefinition],
    /// The session's agents (which `task`'s description lists).
    pub agents: &'a Agents,
}

impl Compactor<'_> {
    /// Replaces the older history by a summary the model writes, keeping the
    /// most recent messages verbatim (at most a quarter of the window, never
    /// splitting a tool call from its result). `turn_start` is where the
    /// current turn's user message is, if a turn is running; it is always
    /// kept. `None` (from `/compact`) summarises everything.
    pub async fn compact(&self, conversation: &mut Conversation, turn_start: Option<usize>) -> Compaction {
        if !settle_model(self.client, self.cancel).await {
            return Compaction::Cancelled;
        }
        let messages = conversation.messages();
        let split = match turn_start {
            Some(turn_start) => {
                let budget = self.client.context_window() / KEPT_TAIL_SHARE;
                split_point(messages, turn_start, budget)
            }
            None => messages.len(),
        };
        if split == 0 {
            return Compaction::NothingToDo;
        }
        let id: Arc<str> = Arc::from(format!("compact_{}", uuid::Uuid::new_v4().simple()));
        self.events.emit(AgentEvent::Compaction(CompactionEvent::Started { id: Arc::clone(&id) }));
        let finished = |outcome| {
            self.events.emit(AgentEvent::Compaction(CompactionEvent::Finished { id: Arc::clone(&id), outcome }));
        };
        let mut request: Vec<Message> = messages[..split].to_vec();
        if matches!(request.last(), Some(Message::User { .. })) {
            // Keep user and assistant alternating for strict chat templates.
            request.push(Message::Assistant {
                text: String::new(),
                reasoning: String::new(),
                reasoning_field: None,
                reasoning_details: None,
                tool_calls: Vec::new(),
                interrupted: false,
            });
        }
        request.push(Message::User { parts: vec![UserPart::Text { text: COMPACT_PROMPT.trim().to_owned() }] });
        let summary = match self.complete_text(&conversation.system_prompt, &request, &id).await {
            Ok(Some(summary)) if !summary.trim().is_empty() => summary,
            Ok(Some(_)) => {
                finished(CompactionOutcome::Failed("the summary was empty".to_owned()));
                return Compaction::Failed(ModelError::InvalidResponse("the summary was empty".to_owned()).into());
            }
            Ok(None) => {
                finished(CompactionOutcome::Cancelled);
                return Compaction::Cancelled;
            }
            Err(error) => {
                tracing::warn!(%error, "compaction failed; going on with the full history");
                finished(CompactionOutcome::Failed(error.to_string()));
                return Compaction::Failed(error);
            }
        };
        finished(CompactionOutcome::Completed(summary.trim().to_owned()));
        let tail = conversation.messages()[split..].to_vec();
        let mut compacted = vec![Message::User {
            parts: vec![UserPart::Text {
                text: format!(
                    "[This conversation was compacted to fit the context window. Summary of everything before this point:]\n\n{}",
                    summary.trim()
                ),
            }],
        }];
        if matches!(tail.first(), None | Some(Message::User { .. })) {
            compacted.push(Message::Assistant {
                text: "Understood. I will continue from this summary.".to_owned(),
                reasoning: String::new(),
                reasoning_field: None,
                reasoning_details: None,
                tool_calls: Vec::new(),
                interrupted: false,
            });
        }
        let prefix = compacted.len();
        compacted.extend(tail);
        conversation.reset(compacted);
        let turn_start = turn_start.map_or(prefix, |start| start.saturating_sub(split) + prefix);
        Compaction::Done { turn_start }
    }

    /// One model request whose text answer is collected, not shown. `None`
    /// when cancelled.
    async fn complete_text(
        &self,
        system_prompt: &SystemPrompt,
        messages: &[Message],
        id: &Arc<str>,
    ) -> Result<Option<String>, TurnError> {
        let request = Request::new(self.client, system_prompt, self.tools, self.agents);
        let mut stream = match open_retrying(self.client, self.events, self.cancel, (&request, messages)).await {
            Ok(stream) => stream,
            Err(NotOpened::Cancelled) => return Ok(None),
            Err(NotOpened::Failed(error)) => return Err(error),
        };
        let mut decoder = StreamDecoder::new("summary_");
        // The summary is shown as it is written (to a client that shows compactions).
        let mut forward = |event: ModelEvent| {
            if let ModelEvent::Text(text) = event {
                let summary = CompactionEvent::Summary { id: Arc::clone(id), text };
                self.events.emit(AgentEvent::Compaction(summary));
            }
        };
        loop {
            let Ok(item) = stream.next().or_cancel(self.cancel).await else { return Ok(None) };
            match item {
                None => {
                    decoder.end(&mut forward);
                    return Ok(Some(decoder.finish().text));
                }
                Some(Ok(chunk)) => {
                    decoder.push(chunk, &mut forward).map_err(|reported| ModelError::Provider(reported.0))?;
                }
                Some(Err(error)) => return Err(error.into()),
            }
        }
    }
}

/// Why [`open_retrying`] returned no stream.
enum NotOpened {
    /// The user cancelled (during a request or a wait).
    Cancelled,
    /// The last attempt's failure, with the retries made when they are worth telling.
    Failed(TurnError),
}

/// The fixed part of a request in the model's prompt profile: the system
/// prompt and the tools (the built-ins in that profile's wording, `task`
/// listing the session's agents).
struct Request<'a> {
    system_prompt: &'a str,
    tools: std::borrow::Cow<'a, [ToolDefinition]>,
}

impl<'a> Request<'a> {
    fn new(
        client: &ModelClient,
        system_prompt: &'a SystemPrompt,
        tools: &'a [ToolDefinition],
        agents: &Agents,
    ) -> Self {
        let profile = client.profile();
        let mut tools = tools::for_profile(tools, profile);
        if !agents.is_builtin() && tools.iter().any(|tool| tool.name() == Tool::Task.name()) {
            let task = tools::task_definition(profile, agents);
            for tool in tools.to_mut().iter_mut().filter(|tool| tool.name() == Tool::Task.name()) {
                *tool = task.clone();
            }
        }
        Request { system_prompt: system_prompt.get(profile), tools }
    }
}

/// Waits (cancellably) until the model's limits are known: the config's, or
/// the server's answer to a bounded probe. `false` when cancelled first.
async fn settle_model(client: &ModelClient, cancel: &CancellationToken) -> bool {
    client.info().or_cancel(cancel).await.is_ok()
}

/// What the user is told, once per session, when the model takes no tools.
fn chat_only_notice(reason: &str) -> String {
    format!(
        "This model takes no tools ({reason}). lathe goes on without them for this session: the model can only \
         answer in text, and cannot read, change or run anything. Switch to a model with tool support (`/model`) \
         for agent work.\n\n"
    )
}

/// Opens a response stream for `(request, messages)`, retrying the
/// failures a retry can fix (see [`retry`]). Each wait is shown to the
/// user as a thought line and raced against `cancel`. Only opening is
/// retried: once an answer has started, a failure is reported with the
/// partial answer kept, since asking again would repeat what the user saw.
async fn open_retrying(
    client: &ModelClient,
    events: &dyn EventSink,
    cancel: &CancellationToken,
    (request, messages): (&Request<'_>, &[Message]),
) -> Result<ResponseStream, NotOpened> {
    let mut retrier = Retrier::new(client.retry_policy().clone(), retry::random_seed());
    loop {
        let opened = client.stream(request.system_prompt, messages, &request.tools).or_cancel(cancel).await;
        let error = match opened {
            Err(Cancelled) => return Err(NotOpened::Cancelled),
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => error,
        };
        let delay = match retrier.after_failure(&error) {
            Decision::Wait(delay) => delay,
            Decision::GiveUp(reason) => {
                let retries = Exhausted { attempts: retrier.attempts(), reason };
                let error = if retries.is_noteworthy() { TurnError::Retried { error, retries } } else { error.into() };
                return Err(NotOpened::Failed(error));
            }
        };
        let next_attempt = retrier.attempts() + 1;
        let max_attempts = retrier.policy().max_attempts();
        tracing::warn!(%error, ?delay, next_attempt, max_attempts, "model request failed; retrying");
        events.emit(AgentEvent::AgentThought {
            message_id: Arc::from(format!("retry_{}", uuid::Uuid::new_v4().simple())),
            text: retry::waiting_message(&error, delay, next_attempt, max_attempts),
        });
        if tokio::time::sleep(delay).or_cancel(cancel).await.is_err() {
            return Err(NotOpened::Cancelled);
        }
    }
}

/// Where a compaction splits the history: everything before the returned
/// index is summarised. The kept tail starts at a user or assistant message
/// (never a tool result, which needs its call), includes `turn_start`, and is
/// as long as fits in `budget` tokens.
fn split_point(messages: &[Message], turn_start: usize, budget: u64) -> usize {
    let mut split = turn_start.min(messages.len());
    let mut kept: u64 = messages[split..].iter().map(estimate_message_tokens).sum();
    while split > 0 {
        let candidate = estimate_message_tokens(&messages[split - 1]);
        if kept + candidate > budget {
            break;
        }
        kept += candidate;
        split -= 1;
    }
    while split > 0 && split < messages.len() && matches!(messages[split], Message::Tool { .. }) {
        split -= 1;
    }
    split
}

/// The size of the next request in tokens: the last exact figure plus an
/// estimate of what came since, or an estimate of everything (about four
/// bytes per token) with this system prompt and these tools.
pub fn estimate_tokens(conversation: &Conversation, system_prompt: &str, tools: &[ToolDefinition]) -> u64 {
    let messages = conversation.messages();
    match conversation.usage_mark {
        Some(mark) if mark.messages <= messages.len() => {
            mark.tokens + messages[mark.messages..].iter().map(estimate_message_tokens).sum::<u64>()
        }
        _ => {
            let tools_bytes = serde_json::to_vec(tools).map_or(0, |bytes| bytes.len());
            estimate_text_tokens(system_prompt)
                + (tools_bytes / 4) as u64
                + messages.iter().map(estimate_message_tokens).sum::<u64>()
        }
    }
}

fn estimate_text_tokens(text: &str) -> u64 {
    (text.len() / 4 + 1) as u64
}

fn estimate_message_tokens(message: &Message) -> u64 {
    let bytes = match message {
        Message::User { parts } => parts
            .iter()
            .map(|part| match part {
                UserPart::Text { text } => text.len(),
                // Providers count an image as roughly a thousand tokens.
                UserPart::Image { .. } => 4000,
            })
            .sum(),
        Message::Assistant { text, tool_calls, .. } => {
            text.len() + tool_calls.iter().map(|c| c.name.len() + c.arguments.len() + c.id.len()).sum::<usize>()
        }
        Message::Tool { content, tool_call_id } => content.len() + tool_call_id.len(),
    };
    // Every message also costs a few tokens of framing.
    (bytes / 4 + 4) as u64
}

/// Keeps the head and the tail of a long text, with a marker saying how much
/// was cut, so one huge tool output cannot fill the window.
pub fn trim_middle(text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let half = max_bytes / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{}\n[... {} bytes omitted from the middle of this output ...]\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

/// Makes a transcript that ended abruptly (the process was killed mid-turn)
/// valid to send again: every tool call gets a result, and when the model's
/// last answer never made it into the transcript, what the user saw of it
/// (`streamed_text`) is kept as an interrupted answer.
pub fn repair_transcript(messages: &mut Vec<Message>, streamed_text: String) {
    let mut answered: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for message in messages.iter() {
        if let Message::Tool { tool_call_id, .. } = message {
            answered.insert(tool_call_id);
        }
    }
    let unanswered: Vec<String> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some(tool_calls),
            Message::User { .. } | Message::Tool { .. } => None,
        })
        .flatten()
        .filter(|call| !answered.contains(call.id.as_str()))
        .map(|call| call.id.clone())
        .collect();
    for id in unanswered {
        messages.push(Message::Tool {
            tool_call_id: id,
            content: "The session ended before this tool call finished.".to_owned(),
        });
    }
    if matches!(messages.last(), Some(Message::User { .. } | Message::Tool { .. })) {
        messages.push(Message::Assistant {
            text: streamed_text,
            reasoning: String::new(),
            reasoning_field: None,
            reasoning_details: None,
            tool_calls: Vec::new(),
            interrupted: true,
        });
    }
}

/// Keeps what the user already saw of an answer that did not finish, marked
/// as interrupted. Tool calls of an unfinished answer never ran and are
/// dropped. The marker message is kept even when empty so that user and
/// assistant messages keep alternating (some chat templates insist).
fn keep_interrupted(conversation: &mut Conversation, partial: Option<StreamDecoder>) {
    let message = match partial {
        Some(decoder) => {
            let output = decoder.finish();
            Message::Assistant {
                text: output.text,
                reasoning: output.reasoning,
                reasoning_field: output.reasoning_field,
                reasoning_details: output.reasoning_details.map(Box::new),
                tool_calls: Vec::new(),
                interrupted: true,
            }
        }
        None => Message::Assistant {
            text: String::new(),
            reasoning: String::new(),
            reasoning_field: None,
            reasoning_details: None,
            tool_calls: Vec::new(),
            interrupted: true,
        },
    };
    conversation.push(message);
}

#[cfg(test)]
mod tests;

mod task;

#[cfg(test)]
mod cancelled_write_tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::config::{Config, NetworkSettings};
    use crate::permission::{ApprovalError, Mode};
    use crate::platform::authority::Target;
    use crate::tools::local::LocalHost;
    use crate::tools::{HostError, Terminals};

    #[derive(Default)]
    struct Recorded(Mutex<Vec<AgentEvent>>);

    impl EventSink for Recorded {
        fn emit(&self, event: AgentEvent) {
            self.0.lock().unwrap().push(event);
        }
    }

    struct NeverAsked;

    impl Approver for NeverAsked {
        fn ask<'a>(&'a self, _: &'a PermissionQuestion) -> BoxFuture<'a, Result<Answer, ApprovalError>> {
            Box::pin(async { panic!("full-auto mode asks nothing") })
        }
    }

    /// The local disk, with the user's cancel landing while a write runs,
    /// which then takes `slow` more to finish.
    struct CancelMidWrite {
        cancel: CancellationToken,
        slow: Duration,
    }

    impl Host for CancelMidWrite {
        fn read_text_file<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
            LocalHost.read_text_file(target)
        }
        fn write_text_file<'a>(&'a self, target: &'a Target, content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
            Box::pin(async move {
                let written = LocalHost.write_text_file(target, content).await;
                self.cancel.cancel();
                tokio::time::sleep(self.slow).await;
                written
            })
        }
        fn reads_via_client(&self) -> bool {
            false
        }
        fn writes_in_place(&self) -> bool {
            false
        }
        fn write_finishes_once_started(&self) -> bool {
            true
        }
        fn terminals(&self) -> Option<&dyn Terminals> {
            None
        }
    }

    /// Issue 12 item 3: the model hears what a write that finished during a
    /// cancel did (and the user sees it completed); the turn still stops. A
    /// write slower than the usual wind-down grace is waited for too.
    #[tokio::test(start_paused = true)]
    async fn a_write_finished_during_a_cancel_is_reported_as_done() {
        for slow in [Duration::ZERO, tools::CANCEL_GRACE * 3] {
            write_during_a_cancel(slow).await;
        }
    }

    async fn write_during_a_cancel(slow: Duration) {
        let dir = tempfile::tempdir().unwrap();
        let roots = vec![dir.path().to_path_buf()];
        let config = Config::from_env(&|_| None);
        let model = config.default_model().unwrap().clone();
        let client = ModelClient::new(Arc::new(model), &NetworkSettings::default()).unwrap();
        let cancel = CancellationToken::new();
        let host = CancelMidWrite { cancel: cancel.clone(), slow };
        let events = Recorded::default();
        let policy = Mutex::new(Policy::new(Mode::FullAuto));
        let limits = ToolLimits::default();
        let seen = tools::versions::FileVersions::default();
        let turn = Turn {
            client: &client,
            settings: &config.agent,
            events: &events,
            cancel: &cancel,
            workspace: Workspace {
                cwd: dir.path(),
                roots: &roots,
                host: &host,
                approver: &NeverAsked,
                policy: &policy,
                limits: &limits,
                seen: &seen,
            },
            tools: tools::definitions_with(false),
            external: None,
            context: &config.context,
            steers: None,
            agents: &crate::agents::Agents::builtin(),
            rules: None,
            hooks: None,
        };
        let call = ToolCallRequest {
            id: "call_1".into(),
            name: "write_file".into(),
            arguments: r#"{"path": "new.txt", "content": "hello\n"}"#.into(),
        };
        let (for_model, flow) = turn.run_tool(&call, false, false, &TurnHooks::none()).await;
        assert_eq!(flow, Flow::Cancelled, "the turn stops");
        assert_eq!(for_model, "Created new.txt (1 line).");
        assert_eq!(std::fs::read_to_string(dir.path().join("new.txt")).unwrap(), "hello\n");
        let last = events.0.lock().unwrap().last().cloned();
        let Some(AgentEvent::ToolCallUpdated { change, .. }) = last else { panic!("no final update: {last:?}") };
        assert_eq!(change.status, Some(ToolCallStatus::Completed));
    }
}
