//! `task`: a sub-agent. The model hands a self-contained job to an agent
//! (see [`crate::agents`]) that runs a turn of its own on the same engine,
//! with its own conversation (the agent's system prompt and the job as its
//! only user message, none of the parent's history); its final answer is
//! the call's result, and none of its reading enters the parent's
//! conversation.
//!
//! The same rules as the parent: the child works in the parent's
//! [`Workspace`] (the session's policy and mode, the same approver, paths
//! and host, hence the same sandbox), with no tool the parent does not
//! offer, never `task` itself (depth 1: its tool list has no `task`, and its
//! system prompt says so), never a question to the user. A question the
//! policy asks about a child's call names the agent.
//!
//! The child runs under a child token of the turn's: a cancel ends it (and
//! its commands) with the parent. Consecutive `task` calls of one response
//! run concurrently, at most `[agent] max_parallel_tasks` at once; their
//! results go back in the order of the calls. The children's token usage is
//! added to the turn's; the context-window occupancy the user sees stays
//! the parent's.
//!
//! What the user sees: every child event comes out of the parent's sink
//! wrapped in [`AgentEvent::Subagent`], its tool-call ids scoped by the
//! task call's, between a `Started` and an `Ended`; front ends decide how
//! to show it.

use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;

use super::*;
use crate::agents::AgentSpec;
use crate::model::Usage;
use crate::permission::ApprovalError;
use crate::prompt::{Environment, subagent_prompt};

/// What one finished `task` call hands back to the turn.
struct TaskResult {
    /// The tool result.
    for_model: String,
    flow: Flow,
    /// The child's token usage, when its server reported any.
    usage: Option<Usage>,
    /// What its requests cost, when known.
    cost: Option<f64>,
}

impl TaskResult {
    fn done(for_model: String, flow: Flow) -> TaskResult {
        TaskResult { for_model, flow, usage: None, cost: None }
    }
}

impl Turn<'_> {
    /// Runs consecutive `task` calls, at most `max_parallel_tasks` at once,
    /// appending their results in call order and their usage to the turn's.
    pub(super) async fn run_tasks(&self, conversation: &mut Conversation, calls: &[ToolCallRequest]) -> Flow {
        let plan = conversation.plan_tools;
        let width = self.settings.max_parallel_tasks.max(1);
        // Collected first: a stream over a closure would not be `Send` for
        // every lifetime (rust-lang/rust#102211).
        let mut started: Vec<BoxFuture<'_, TaskResult>> = Vec::with_capacity(calls.len());
        for call in calls {
            started.push(self.run_task(call, plan));
        }
        let results: Vec<TaskResult> = futures_util::stream::iter(started).buffered(width).collect().await;
        let mut flow = Flow::Continue;
        for (call, result) in calls.iter().zip(results) {
            if let Some(usage) = result.usage {
                let total = conversation.turn_usage.get_or_insert_default();
                total.input_tokens += usage.input_tokens;
                total.output_tokens += usage.output_tokens;
            }
            if let Some(cost) = result.cost {
                *conversation.cost.get_or_insert(0.0) += cost;
            }
            conversation.push(self.tool_result(call, result.for_model));
            if result.flow == Flow::Cancelled {
                flow = Flow::Cancelled;
            }
        }
        flow
    }

    /// One `task` call: the agent runs the job in a turn of its own.
    fn run_task<'s>(&'s self, call: &'s ToolCallRequest, plan: bool) -> BoxFuture<'s, TaskResult> {
        // Boxed: a turn runs tasks that run turns (one level deep).
        Box::pin(async move {
            if self.cancel.is_cancelled() {
                self.finish_call(&call.id, ToolOutcome::cancelled());
                return TaskResult::done(CANCELLED_RESULT.to_owned(), Flow::Cancelled);
            }
            let raw_input = serde_json::from_str::<serde_json::Value>(&call.arguments).ok();
            let refuse = |message: String| {
                self.finish_call(&call.id, ToolOutcome::failed(message.clone()));
                TaskResult::done(message, Flow::Continue)
            };
            let (runnable, kind, description) = match self.prepare(call, plan) {
                Ok(prepared) => prepared,
                Err(message) => {
                    self.update(&call.id, ToolCallChange { raw_input, ..ToolCallChange::default() });
                    return refuse(message);
                }
            };
            let args = match &runnable {
                Runnable::Builtin(prepared) => prepared.task().cloned(),
                Runnable::External(..) => None,
            };
            self.update(
                &call.id,
                ToolCallChange {
                    title: Some(description.title.clone()),
                    kind: Some(kind),
                    raw_input,
                    ..ToolCallChange::default()
                },
            );
            let Some(args) = args else { return refuse("Not run: this is not a task call.".to_owned()) };
            let name =
                args.agent.as_deref().map(str::trim).filter(|name| !name.is_empty()).unwrap_or(crate::agents::EXPLORE);
            let Some(agent) = self.agents.get(name) else {
                return refuse(format!("There is no agent named \"{name}\". Agents: {}.", self.agents.names()));
            };
            if args.prompt.trim().is_empty() {
                return refuse("Not run: the prompt is empty. Say the whole job in `prompt`.".to_owned());
            }
            self.update(
                &call.id,
                ToolCallChange { status: Some(ToolCallStatus::InProgress), ..ToolCallChange::default() },
            );
            let Delegated { outcome, flow, stop, usage, cost } =
                self.delegate(call, agent, &args.description, args.prompt).await;
            let for_model = outcome.for_model.clone();
            let report = match outcome.status {
                OutcomeStatus::Completed => Some(for_model.clone()),
                OutcomeStatus::Failed | OutcomeStatus::Cancelled => None,
            };
            self.finish_call(&call.id, outcome);
            self.events.emit(AgentEvent::Subagent(SubagentEvent {
                call_id: call.id.clone(),
                agent: Arc::from(agent.name.as_str()),
                change: SubagentChange::Ended { stop, report },
            }));
            TaskResult { for_model, flow, usage, cost }
        })
    }

    /// Runs `agent`'s turn on `job` and says how it went.
    async fn delegate(&self, call: &ToolCallRequest, agent: &AgentSpec, description: &str, job: String) -> Delegated {
        let name: Arc<str> = Arc::from(agent.name.as_str());
        // Never more than the parent offers (its configuration, its MCP
        // servers), and never what no sub-agent gets.
        let offered = self.offered(false);
        let tools: Vec<ToolDefinition> =
            offered.iter().filter(|definition| agent.allows(definition.name())).cloned().collect();
        // The parent's MCP tools the agent may use, through the session's
        // connections (the parent settled them before its first request).
        let external = self.external.map(|inner| ChildTools { inner, agent, seen: Mutex::default() });
        let cancel = self.cancel.child_token();
        let events = ChildEvents { parent: self.events, call_id: call.id.clone(), agent: Arc::clone(&name) };
        let approver =
            ChildApprover { parent: self.workspace.approver, call_id: call.id.clone(), agent: Arc::clone(&name) };
        let date = Environment::today();
        // The sandbox sentence is the parent's system prompt's; a sub-agent's
        // refused command still carries the sandbox's own note.
        let shell = self.workspace.host.launcher().shell().await.for_prompt();
        let environment = Environment {
            cwd: self.workspace.cwd,
            os: std::env::consts::OS,
            date: &date,
            sandbox: None,
            shell: shell.as_deref(),
        };
        let mut conversation = Conversation::new(
            subagent_prompt(&agent.prompt, &environment, self.agents.instructions()),
            Vec::new(),
            None,
        );
        let started = SubagentChange::Started { description: description.trim().to_owned(), job: job.clone() };
        self.events.emit(AgentEvent::Subagent(SubagentEvent {
            call_id: call.id.clone(),
            agent: Arc::clone(&name),
            change: started,
        }));
        let child = Turn {
            // The model the agent's file names, else the session's.
            client: self.agents.client(&agent.name).unwrap_or(self.client),
            settings: self.settings,
            events: &events,
            cancel: &cancel,
            workspace: Workspace { approver: &approver, ..self.workspace.share() },
            tools: &tools,
            external: external.as_ref().map(|tools| tools as &dyn ExternalTools),
            context: self.context,
            steers: None,
            agents: self.agents,
            // Its "always" answers are kept as the parent's are, and the
            // user's hooks see its calls too (a hook that blocks a command
            // blocks it in a sub-agent).
            rules: self.rules,
            hooks: self.hooks,
        };
        let ended = child.run(&mut conversation, vec![UserPart::Text { text: job }]).await;
        let stop = ended.as_ref().ok().copied();
        let report = last_answer(&conversation);
        let (usage, cost) = (conversation.turn_usage.take(), conversation.cost);
        let (outcome, flow) = match ended {
            _ if self.cancel.is_cancelled() => (ToolOutcome::cancelled(), Flow::Cancelled),
            Ok(StopReason::EndTurn) if report.trim().is_empty() => {
                (ToolOutcome::failed(format!("The {name} agent ended without a report.")), Flow::Continue)
            }
            Ok(StopReason::EndTurn) => (ToolOutcome::completed(report), Flow::Continue),
            Ok(StopReason::MaxTurnRequests) => (
                ToolOutcome::completed(format!(
                    "{report}\n\n[The {name} agent used up its model requests before it finished.]"
                )),
                Flow::Continue,
            ),
            Ok(StopReason::MaxTokens) => (
                ToolOutcome::completed(format!("{report}\n\n[The {name} agent's answer hit the output-token limit.]")),
                Flow::Continue,
            ),
            Ok(StopReason::Refusal) => {
                (ToolOutcome::failed(format!("The {name} agent's model refused the job.")), Flow::Continue)
            }
            Ok(StopReason::Cancelled) => (ToolOutcome::cancelled(), Flow::Cancelled),
            Err(error) => (ToolOutcome::failed(format!("The {name} agent failed: {error}")), Flow::Continue),
        };
        Delegated { outcome, flow, stop, usage, cost }
    }
}

/// How a sub-agent's turn went.
struct Delegated {
    /// The task call's outcome.
    outcome: ToolOutcome,
    flow: Flow,
    /// How the child's turn ended; `None` when it failed.
    stop: Option<StopReason>,
    usage: Option<Usage>,
    cost: Option<f64>,
}

impl<'a> Workspace<'a> {
    /// The same workspace, to build a sub-agent's from.
    fn share(&self) -> Workspace<'a> {
        Workspace {
            cwd: self.cwd,
            roots: self.roots,
            host: self.host,
            approver: self.approver,
            policy: self.policy,
            limits: self.limits,
            seen: self.seen,
        }
    }
}

/// The text of the conversation's last answer.
fn last_answer(conversation: &Conversation) -> String {
    conversation
        .messages()
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant { text, .. } => Some(text.clone()),
            Message::User { .. } | Message::Tool { .. } => None,
        })
        .unwrap_or_default()
}

/// A child tool call's id in the session: scoped by the task call's.
pub fn scoped_id(task_call_id: &str, id: &str) -> String {
    format!("{task_call_id}.{id}")
}

/// The parent's external (MCP) tools as a sub-agent has them: those its
/// agent allows, nothing more (an MCP tool is named `server__tool`, as in an
/// agent file's `tools`). Calls run through the parent session's
/// connections; the child's turn judges them by the session's policy, as
/// the parent's would be.
#[derive(Debug)]
struct ChildTools<'a> {
    inner: &'a dyn ExternalTools,
    agent: &'a AgentSpec,
    /// The parent's list last seen, and what the agent gets of it: the same
    /// `Arc` (and bytes) for every request until the parent's list changes.
    seen: Mutex<Option<Filtered>>,
}

/// A tool list and the part of it a sub-agent gets.
type Filtered = (Arc<[ToolDefinition]>, Arc<[ToolDefinition]>);

impl ExternalTools for ChildTools<'_> {
    fn settle<'b>(&'b self, cancel: &'b CancellationToken) -> BoxFuture<'b, Vec<String>> {
        // The parent's turn settled them already: a server still starting
        // gets another bounded chance.
        self.inner.settle(cancel)
    }

    fn definitions(&self) -> Arc<[ToolDefinition]> {
        let all = self.inner.definitions();
        let mut seen = lock(&self.seen);
        match &*seen {
            Some((parent, mine)) if Arc::ptr_eq(parent, &all) => Arc::clone(mine),
            _ => {
                let mine: Arc<[ToolDefinition]> =
                    all.iter().filter(|definition| self.agent.allows(definition.name())).cloned().collect();
                *seen = Some((all, Arc::clone(&mine)));
                mine
            }
        }
    }

    fn pending(&self, name: &str) -> Option<(String, ToolKind)> {
        self.agent.allows(name).then(|| self.inner.pending(name)).flatten()
    }

    fn prepare(&self, name: &str, arguments: &str) -> Option<Result<ExternalCall, String>> {
        self.agent.allows(name).then(|| self.inner.prepare(name, arguments)).flatten()
    }

    fn run<'b>(&'b self, call: ExternalCall, ctx: &'b ToolContext<'b>) -> BoxFuture<'b, ToolOutcome> {
        self.inner.run(call, ctx)
    }
}

/// A sub-agent's events, on their way to the parent's sink.
struct ChildEvents<'a> {
    parent: &'a dyn EventSink,
    call_id: String,
    agent: Arc<str>,
}

impl EventSink for ChildEvents<'_> {
    fn emit(&self, event: AgentEvent) {
        let event = match event {
            // The occupancy the user sees is the parent's; the child's tokens
            // are added to the turn's usage when it ends.
            AgentEvent::Usage { .. } => return,
            // A sub-agent never switches the session's mode.
            AgentEvent::ModeChanged(_) => return,
            AgentEvent::ToolCallStarted { id, title, kind, name } => {
                AgentEvent::ToolCallStarted { id: scoped_id(&self.call_id, &id), title, kind, name }
            }
            AgentEvent::ToolCallUpdated { id, change } => {
                AgentEvent::ToolCallUpdated { id: scoped_id(&self.call_id, &id), change }
            }
            other @ (AgentEvent::AgentText { .. }
            | AgentEvent::AgentThought { .. }
            | AgentEvent::UserText { .. }
            | AgentEvent::Notice { .. }
            | AgentEvent::PlanDocument { .. }
            | AgentEvent::Compaction(_)
            | AgentEvent::Plan(_)
            | AgentEvent::Subagent(_)) => other,
        };
        self.parent.emit(AgentEvent::Subagent(SubagentEvent {
            call_id: self.call_id.clone(),
            agent: Arc::clone(&self.agent),
            change: SubagentChange::Event(Box::new(event)),
        }));
    }
}

/// The parent's approver, for a sub-agent's calls: the question names the
/// agent and the call by its id in the session. Nobody answers a
/// sub-agent's own questions (the default [`Approver::ask_user`]).
struct ChildApprover<'a> {
    parent: &'a dyn Approver,
    call_id: String,
    agent: Arc<str>,
}

impl Approver for ChildApprover<'_> {
    fn ask<'a>(&'a self, question: &'a PermissionQuestion) -> BoxFuture<'a, Result<Answer, ApprovalError>> {
        let mut question = question.clone();
        question.call_id = scoped_id(&self.call_id, &question.call_id);
        question.title = format!("{} agent: {}", self.agent, question.title);
        question.parent_call_id = Some(self.call_id.clone());
        Box::pin(async move { self.parent.ask(&question).await })
    }
}
