//! Agent events in the shape a session's journal keeps them: the ACP
//! `session/update` an editor is sent, byte for byte. That shape is the
//! journal's format on purpose (an editor can `session/load` a session the
//! terminal started and see what the terminal user saw), so this module
//! knows the ACP schema's update types, as the journal's format, and nothing
//! of the protocol around them (`acp` sends; `term` shows and records).
//! Also the ACP shapes of how a turn ended, which `lathe exec --json`
//! prints on purpose (one schema for scripts and editors).

use std::sync::Arc;

use serde_json::json;

use agent_client_protocol_schema::v1::{
    ClientCapabilities, CompactionStatus, CompactionSummaryChunk, CompactionUpdate, Content, ContentBlock,
    ContentChunk, Cost, CurrentModeUpdate, Diff, ErrorStopReason, IdleStateUpdate, IdleStopReason, ImageContent,
    MessageId, Notice, NoticeSeverity, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, PlanUpdate,
    PlanUpdateContent, ResourceLink, RunningStateUpdate, SessionId, SessionMessage, SessionNotification,
    SessionReference, SessionUpdate, StateUpdate, StopReason as AcpStopReason, SubagentUpdate, Terminal, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallStatus as AcpToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind as AcpToolKind, UsageUpdate,
};

use super::text::{Lines, shown};
use crate::agent::{
    AgentEvent, CompactionEvent, CompactionOutcome, StopReason, SubagentChange, SubagentEvent, ToolCallChange,
    ToolCallStatus, TurnError,
};
use crate::model::ModelError;
use crate::rpc::{INTERNAL_ERROR, RpcError, encode_notification};
use crate::session::Journal;
use crate::store::{Chunk, ChunkKind};
use crate::tools::{DisplayContent, Location, PlanItem, PlanPriority, PlanStatus, ToolKind};

/// Records one update of session `session_id` in `journal` the way
/// `acp`'s `SessionEvents` does, for a front end that shows it some other way
/// (the terminal's): streamed text as a chunk, anything else as the line an
/// editor would have been sent.
pub fn record(journal: &Journal, session_id: &SessionId, update: SessionUpdate) {
    match streamed_text(&update) {
        Some(chunk) => journal.record_chunk(chunk),
        None => match encode_notification("session/update", &SessionNotification::new(session_id.clone(), update)) {
            Ok(line) => journal.record_update_line(line),
            Err(err) => tracing::error!(%err, "cannot encode a session update"),
        },
    }
}

/// A message chunk of plain text (what streaming sends), as the journal
/// keeps it; `None` for anything else, which is recorded as sent.
pub(crate) fn streamed_text(update: &SessionUpdate) -> Option<Chunk> {
    let (kind, chunk) = match update {
        SessionUpdate::AgentMessageChunk(chunk) => (ChunkKind::Agent, chunk),
        SessionUpdate::AgentThoughtChunk(chunk) => (ChunkKind::Thought, chunk),
        SessionUpdate::UserMessageChunk(chunk) => (ChunkKind::User, chunk),
        _ => return None,
    };
    let ContentBlock::Text(text) = &chunk.content else { return None };
    if chunk.meta.is_some() || text.meta.is_some() || text.annotations.is_some() {
        return None;
    }
    Some(Chunk {
        kind,
        message_id: chunk.message_id.as_ref().map(|id| Arc::clone(&id.0)),
        text: text.text.clone(),
        session: None,
    })
}

/// Which of the newer, capability-gated session updates a client said it
/// shows. A client that shows none of them gets what lathe sent before
/// they existed, byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offers {
    /// `plan_update` (client capability `plan`); else the legacy `plan`.
    pub plan: bool,
    /// `compaction_update` and `compaction_summary_chunk`
    /// (`session.compaction`); else a thought line.
    pub compaction: bool,
    /// `notice` (`session.notices`); else an agent message.
    pub notices: bool,
    /// Sub-agents as subagent sessions (`subagents`): `subagent_update`,
    /// the child's updates under its own session id, a `session` link on
    /// the task call. Else the child's tool calls are the parent session's,
    /// each with `_meta.lathe.parentToolCallId`, and the task call shows
    /// the latest step.
    pub subagents: bool,
}

impl Offers {
    /// Everything (a front end that shows every update its own way), but
    /// sub-agents the way every client can be shown them: such a front end
    /// records sub-agents for any editor that loads the session later.
    pub const ALL: Offers = Offers { plan: true, compaction: true, notices: true, subagents: false };

    /// What a client with these capabilities shows.
    pub fn of(capabilities: &ClientCapabilities) -> Offers {
        let session = capabilities.session.as_ref();
        Offers {
            plan: capabilities.plan.is_some(),
            compaction: session.is_some_and(|s| s.compaction.is_some()),
            notices: session.is_some_and(|s| s.notices.is_some()),
            subagents: capabilities.subagents.is_some(),
        }
    }
}

/// One update an event becomes, and whether it is history (journaled and
/// replayed) or about now only.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Sent and recorded for replay.
    History(SessionUpdate),
    /// Sent only.
    Live(SessionUpdate),
    /// Sent and recorded, as an update of another session: a sub-agent's
    /// (see [`subagent_session_id`]).
    Child(SessionId, SessionUpdate),
}

/// The session id of the sub-agent that task call `call_id` of session
/// `parent` runs.
pub fn subagent_session_id(parent: &SessionId, call_id: &str) -> SessionId {
    SessionId::new(format!("{}.{call_id}", parent.0))
}

/// The `_meta` of a sub-agent's tool call shown in the parent's session.
pub fn parent_call_meta(call_id: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut meta = serde_json::Map::new();
    meta.insert("lathe".to_owned(), json!({ "parentToolCallId": call_id }));
    meta
}

/// The id of the plan written in plan mode: one per session, each
/// `plan_update` replaces it.
pub const PLAN_ID: &str = "plan";

/// The thought a client that does not show compactions sees when one starts.
pub const COMPACTION_THOUGHT: &str =
    "Summarising the earlier conversation to stay within the model's context window…\n";

/// The `session/update`s for an agent event of session `session`, for a
/// client that shows `offers`.
pub fn to_updates(event: AgentEvent, offers: Offers, session: &SessionId) -> Vec<Out> {
    let history = |update| vec![Out::History(update)];
    match event {
        AgentEvent::AgentText { message_id, text } => history(SessionUpdate::AgentMessageChunk(
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(message_id)),
        )),
        AgentEvent::AgentThought { message_id, text } => history(SessionUpdate::AgentThoughtChunk(
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(message_id)),
        )),
        AgentEvent::UserText { message_id, text } => history(SessionUpdate::UserMessageChunk(
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(message_id)),
        )),
        AgentEvent::ToolCallStarted { id, title, kind, name } => history(SessionUpdate::ToolCall(
            ToolCall::new(id, shown(&title, Lines::One))
                .kind(tool_kind(kind))
                .status(AcpToolCallStatus::Pending)
                .name(shown(&name, Lines::One).into_owned()),
        )),
        AgentEvent::ToolCallUpdated { id, change } => {
            history(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields(change))))
        }
        AgentEvent::Plan(items) => history(SessionUpdate::Plan(Plan::new(items.into_iter().map(plan_entry).collect()))),
        AgentEvent::PlanDocument { markdown } if offers.plan => {
            history(SessionUpdate::PlanUpdate(PlanUpdate::new(PlanUpdateContent::markdown(PLAN_ID, markdown))))
        }
        AgentEvent::PlanDocument { markdown } => history(SessionUpdate::Plan(markdown_plan(&markdown))),
        AgentEvent::Usage { used, size, estimated, cost } => {
            let mut update = UsageUpdate::new(used, size);
            if estimated {
                // The server reported no usage: say that the figure is lathe's estimate.
                let mut meta = serde_json::Map::new();
                meta.insert("lathe".to_owned(), serde_json::json!({ "estimated": true }));
                update = update.meta(meta);
            }
            if let Some(cost) = cost {
                update = update.cost(Cost::new(cost, "USD"));
            }
            history(SessionUpdate::UsageUpdate(update))
        }
        AgentEvent::Notice { title, text } if offers.notices => {
            // Escaped here whoever made it (escaping escaped text changes nothing).
            let notice = Notice::new(NoticeSeverity::Warning, shown(&title, Lines::One))
                .description(shown(text.trim(), Lines::Many).into_owned());
            vec![Out::Live(SessionUpdate::Notice(notice))]
        }
        AgentEvent::Notice { text, .. } => {
            let message_id = MessageId::new(format!("notice_{}", uuid::Uuid::new_v4().simple()));
            history(SessionUpdate::AgentMessageChunk(
                ContentChunk::new(ContentBlock::from(shown(&text, Lines::Many).into_owned())).message_id(message_id),
            ))
        }
        AgentEvent::ModeChanged(mode) => {
            vec![Out::Live(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.id())))]
        }
        AgentEvent::Compaction(event) => compaction(event, offers.compaction),
        AgentEvent::Subagent(event) => subagent(event, offers, session),
    }
}

/// A sub-agent's event (see [`crate::agent::SubagentEvent`]), the
/// standard way for a client that shows subagent sessions, else as tool
/// calls of the parent's (see [`Offers::subagents`]).
fn subagent(event: SubagentEvent, offers: Offers, session: &SessionId) -> Vec<Out> {
    let SubagentEvent { call_id, agent, change } = event;
    if offers.subagents {
        return subagent_session(&call_id, &agent, change, offers, session);
    }
    let step = |title: &str| {
        let content = vec![tool_content(DisplayContent::Text(shown(title, Lines::One).into_owned()))];
        Out::History(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call_id.clone(),
            ToolCallUpdateFields::new().content(content),
        )))
    };
    match change {
        SubagentChange::Started { .. } | SubagentChange::Ended { .. } => Vec::new(),
        SubagentChange::Event(inner) => match *inner {
            AgentEvent::ToolCallStarted { id, title, kind, name } => {
                let call = ToolCall::new(id, shown(&title, Lines::One))
                    .kind(tool_kind(kind))
                    .status(AcpToolCallStatus::Pending)
                    .name(shown(&name, Lines::One).into_owned())
                    .meta(parent_call_meta(&call_id));
                vec![Out::History(SessionUpdate::ToolCall(call)), step(&title)]
            }
            AgentEvent::ToolCallUpdated { id, change } => {
                let title = change.title.clone();
                let update = ToolCallUpdate::new(id, fields(change)).meta(parent_call_meta(&call_id));
                let mut out = vec![Out::History(SessionUpdate::ToolCallUpdate(update))];
                out.extend(title.map(|title| step(&title)));
                out
            }
            notice @ AgentEvent::Notice { .. } => to_updates(notice, offers, session),
            AgentEvent::AgentText { .. }
            | AgentEvent::AgentThought { .. }
            | AgentEvent::UserText { .. }
            | AgentEvent::PlanDocument { .. }
            | AgentEvent::ModeChanged(_)
            | AgentEvent::Compaction(_)
            | AgentEvent::Plan(_)
            | AgentEvent::Subagent(_)
            | AgentEvent::Usage { .. } => Vec::new(),
        },
    }
}

/// A sub-agent as a subagent session: announced on the parent's session
/// (before any of its own updates) and linked from the task call, its
/// events under its own session id, idle when it ends.
fn subagent_session(
    call_id: &str,
    agent: &str,
    change: SubagentChange,
    offers: Offers,
    session: &SessionId,
) -> Vec<Out> {
    let child = subagent_session_id(session, call_id);
    match change {
        SubagentChange::Started { description, job } => {
            let announce = SubagentUpdate::new(child.clone())
                .title(shown(agent, Lines::One).into_owned())
                .description(shown(&description, Lines::One).into_owned())
                .state(StateUpdate::Running(RunningStateUpdate::new()));
            let link = ToolCallUpdateFields::new()
                .content(vec![ToolCallContent::Session(SessionReference::new(child.clone()))]);
            let message = SessionMessage::new(format!("job_{call_id}"))
                .sender_session_id(session.clone())
                .recipient_session_id(child.clone())
                .content(vec![ContentBlock::from(job)]);
            vec![
                Out::History(SessionUpdate::SubagentUpdate(announce)),
                Out::History(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.to_owned(), link))),
                Out::Child(child, SessionUpdate::SessionMessage(message)),
            ]
        }
        SubagentChange::Event(inner) => to_updates(*inner, offers, &child)
            .into_iter()
            .filter_map(|out| match out {
                Out::History(update) => Some(Out::Child(child.clone(), update)),
                // What is not history (a notice) stays the parent's, live.
                Out::Live(update) => Some(Out::Live(update)),
                Out::Child(..) => None,
            })
            .collect(),
        SubagentChange::Ended { stop, report } => {
            let reason = match stop {
                Some(StopReason::EndTurn) => IdleStopReason::EndTurn,
                Some(StopReason::MaxTokens) => IdleStopReason::MaxTokens,
                Some(StopReason::MaxTurnRequests) => IdleStopReason::MaxTurnRequests,
                Some(StopReason::Refusal) => IdleStopReason::Refusal,
                Some(StopReason::Cancelled) => IdleStopReason::Cancelled,
                None => IdleStopReason::Error(ErrorStopReason::new()),
            };
            let idle =
                SubagentUpdate::new(child.clone()).state(StateUpdate::Idle(IdleStateUpdate::new().stop_reason(reason)));
            // The task call's final content replaced the link: it keeps both.
            let mut content = vec![ToolCallContent::Session(SessionReference::new(child))];
            content.extend(report.map(|report| tool_content(DisplayContent::Text(report))));
            let link = ToolCallUpdateFields::new().content(content);
            vec![
                Out::History(SessionUpdate::SubagentUpdate(idle)),
                Out::History(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.to_owned(), link))),
            ]
        }
    }
}

/// A compaction as `compaction_update`s and `compaction_summary_chunk`s
/// (the finished one recorded: replay shows it), or, for a client that does
/// not show them, the thought line lathe sent before they existed.
fn compaction(event: CompactionEvent, offered: bool) -> Vec<Out> {
    match (event, offered) {
        (CompactionEvent::Started { id }, true) => {
            vec![Out::Live(SessionUpdate::CompactionUpdate(CompactionUpdate::new(id, CompactionStatus::InProgress)))]
        }
        (CompactionEvent::Started { id }, false) => vec![Out::History(SessionUpdate::AgentThoughtChunk(
            ContentChunk::new(ContentBlock::from(COMPACTION_THOUGHT)).message_id(MessageId::new(id)),
        ))],
        (CompactionEvent::Summary { id, text }, true) => {
            vec![Out::Live(SessionUpdate::CompactionSummaryChunk(CompactionSummaryChunk::new(
                id,
                ContentBlock::from(text),
            )))]
        }
        (CompactionEvent::Finished { id, outcome }, true) => {
            let update = match outcome {
                CompactionOutcome::Completed(summary) => {
                    CompactionUpdate::new(id, CompactionStatus::Completed).summary(vec![ContentBlock::from(summary)])
                }
                CompactionOutcome::Failed(error) => CompactionUpdate::new(id, CompactionStatus::Failed).error(error),
                CompactionOutcome::Cancelled => CompactionUpdate::new(id, CompactionStatus::Cancelled),
            };
            vec![Out::History(SessionUpdate::CompactionUpdate(update))]
        }
        (CompactionEvent::Summary { .. } | CompactionEvent::Finished { .. }, false) => Vec::new(),
    }
}

/// A Markdown plan as the legacy `plan` entries, for a client that does not
/// show `plan_update`: one entry per item of its lists (`- [x]` done), or
/// per line when it has no list; headings and blank lines are left out.
pub fn markdown_plan(markdown: &str) -> Plan {
    let lines: Vec<&str> = markdown.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    let item = |line: &str| -> Option<String> {
        let rest =
            line.strip_prefix("- ").or_else(|| line.strip_prefix("* ")).or_else(|| line.strip_prefix("+ ")).or_else(
                || {
                    let digits = line.find(|c: char| !c.is_ascii_digit()).filter(|&n| n > 0)?;
                    line[digits..].strip_prefix(". ").or_else(|| line[digits..].strip_prefix(") "))
                },
            )?;
        Some(rest.trim().to_owned())
    };
    let listed: Vec<String> = lines.iter().filter_map(|line| item(line)).collect();
    let steps = if listed.is_empty() {
        lines.iter().filter(|line| !line.starts_with('#')).map(|line| (*line).to_owned()).collect()
    } else {
        listed
    };
    let entries = steps
        .into_iter()
        .map(|step| {
            let (status, text) = match step.strip_prefix("[x] ").or_else(|| step.strip_prefix("[X] ")) {
                Some(done) => (PlanEntryStatus::Completed, done.to_owned()),
                None => (PlanEntryStatus::Pending, step.strip_prefix("[ ] ").unwrap_or(&step).to_owned()),
            };
            PlanEntry::new(shown(&text, Lines::One), PlanEntryPriority::Medium, status)
        })
        .collect();
    Plan::new(entries)
}

/// The ACP fields of a tool-call change.
pub fn fields(change: ToolCallChange) -> ToolCallUpdateFields {
    let mut fields = ToolCallUpdateFields::new();
    if let Some(title) = change.title {
        fields = fields.title(shown(&title, Lines::One));
    }
    if let Some(kind) = change.kind {
        fields = fields.kind(tool_kind(kind));
    }
    if let Some(status) = change.status {
        fields = fields.status(match status {
            ToolCallStatus::Pending => AcpToolCallStatus::Pending,
            ToolCallStatus::InProgress => AcpToolCallStatus::InProgress,
            ToolCallStatus::Completed => AcpToolCallStatus::Completed,
            ToolCallStatus::Failed => AcpToolCallStatus::Failed,
        });
    }
    if let Some(content) = change.content {
        fields = fields.content(content.into_iter().map(tool_content).collect::<Vec<_>>());
    }
    if let Some(locations) = change.locations {
        fields = fields.locations(locations.into_iter().map(location).collect::<Vec<_>>());
    }
    if let Some(raw_input) = change.raw_input {
        fields = fields.raw_input(raw_input);
    }
    if let Some(raw_output) = change.raw_output {
        fields = fields.raw_output(raw_output);
    }
    fields
}

/// The ACP tool kind.
pub fn tool_kind(kind: ToolKind) -> AcpToolKind {
    match kind {
        ToolKind::Read => AcpToolKind::Read,
        ToolKind::Edit => AcpToolKind::Edit,
        ToolKind::Delete => AcpToolKind::Delete,
        ToolKind::Move => AcpToolKind::Move,
        ToolKind::Search => AcpToolKind::Search,
        ToolKind::Execute => AcpToolKind::Execute,
        ToolKind::Think => AcpToolKind::Think,
        ToolKind::Fetch => AcpToolKind::Fetch,
        ToolKind::Other => AcpToolKind::Other,
    }
}

/// The ACP tool-call content.
pub fn tool_content(content: DisplayContent) -> ToolCallContent {
    match content {
        DisplayContent::Text(text) => ToolCallContent::Content(Content::new(ContentBlock::from(text))),
        DisplayContent::Diff { path, old_text, new_text } => {
            ToolCallContent::Diff(Diff::new(wire_path(&path), new_text).old_text(old_text))
        }
        DisplayContent::Terminal(id) => ToolCallContent::Terminal(Terminal::new(id)),
        DisplayContent::Image { data, mime_type } => {
            ToolCallContent::Content(Content::new(ContentBlock::Image(ImageContent::new(data, mime_type))))
        }
        DisplayContent::ResourceLink { uri, name } => {
            ToolCallContent::Content(Content::new(ContentBlock::ResourceLink(ResourceLink::new(name, uri))))
        }
    }
}

/// The ACP location.
pub fn location(location: Location) -> ToolCallLocation {
    ToolCallLocation::new(wire_path(&location.path)).line(location.line)
}

/// A path as JSON can carry it. File names need not be UTF-8, but JSON
/// strings must be: an unrepresentable byte becomes U+FFFD rather than the
/// whole update failing to encode (and the editor never hearing of the call).
fn wire_path(path: &std::path::Path) -> std::path::PathBuf {
    match path.to_str() {
        Some(_) => path.to_path_buf(),
        None => std::path::PathBuf::from(path.to_string_lossy().into_owned()),
    }
}

fn plan_entry(item: PlanItem) -> PlanEntry {
    let priority = match item.priority {
        PlanPriority::High => PlanEntryPriority::High,
        PlanPriority::Medium => PlanEntryPriority::Medium,
        PlanPriority::Low => PlanEntryPriority::Low,
    };
    let status = match item.status {
        PlanStatus::Pending => PlanEntryStatus::Pending,
        PlanStatus::InProgress => PlanEntryStatus::InProgress,
        PlanStatus::Completed => PlanEntryStatus::Completed,
    };
    PlanEntry::new(shown(&item.content, Lines::One), priority, status)
}

/// The ACP stop reason for how a turn ended.
pub fn to_acp_stop_reason(stop: StopReason) -> AcpStopReason {
    match stop {
        StopReason::EndTurn => AcpStopReason::EndTurn,
        StopReason::MaxTokens => AcpStopReason::MaxTokens,
        StopReason::MaxTurnRequests => AcpStopReason::MaxTurnRequests,
        StopReason::Refusal => AcpStopReason::Refusal,
        StopReason::Cancelled => AcpStopReason::Cancelled,
    }
}

/// The JSON-RPC error (code, message, data) for a failed turn.
pub fn turn_error_to_rpc(err: &TurnError) -> RpcError {
    match err {
        TurnError::Model(model) | TurnError::Retried { error: model, .. } => {
            let mut data = json!({ "kind": model.kind() });
            if let Some(status) = model.status() {
                data["status"] = json!(status);
            }
            if let Some(wait) = model.retry_after() {
                data["retryAfterMs"] = json!(wait.as_millis());
            }
            if let ModelError::Http { message, .. } | ModelError::Provider(message) = model {
                data["providerMessage"] = json!(message);
            }
            if let TurnError::Retried { retries, .. } = err {
                data["attempts"] = json!(retries.attempts);
            }
            // For a retried request this ends with what the retries came to.
            let mut message = err.to_string();
            if let Some(first) = message.get(..1) {
                message = format!("{}{}", first.to_uppercase(), &message[1..]);
            }
            RpcError::new(INTERNAL_ERROR, message).with_data(data)
        }
    }
}
