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
    Content, ContentBlock, ContentChunk, Diff, ImageContent, MessageId, Plan, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, ResourceLink, SessionId, SessionNotification, SessionUpdate, StopReason as AcpStopReason,
    Terminal, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus as AcpToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind as AcpToolKind, UsageUpdate,
};

use super::text::{Lines, shown};
use crate::agent::{AgentEvent, StopReason, ToolCallChange, ToolCallStatus, TurnError};
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
    Some(Chunk { kind, message_id: chunk.message_id.as_ref().map(|id| Arc::clone(&id.0)), text: text.text.clone() })
}

/// The `session/update` for an agent event.
pub fn to_update(event: AgentEvent) -> SessionUpdate {
    match event {
        AgentEvent::AgentText { message_id, text } => SessionUpdate::AgentMessageChunk(
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(message_id)),
        ),
        AgentEvent::AgentThought { message_id, text } => SessionUpdate::AgentThoughtChunk(
            ContentChunk::new(ContentBlock::from(text)).message_id(MessageId::new(message_id)),
        ),
        AgentEvent::ToolCallStarted { id, title, kind } => SessionUpdate::ToolCall(
            ToolCall::new(id, shown(&title, Lines::One)).kind(tool_kind(kind)).status(AcpToolCallStatus::Pending),
        ),
        AgentEvent::ToolCallUpdated { id, change } => {
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(id, fields(change)))
        }
        AgentEvent::Plan(items) => SessionUpdate::Plan(Plan::new(items.into_iter().map(plan_entry).collect())),
        AgentEvent::Usage { used, size, estimated } => {
            let mut update = UsageUpdate::new(used, size);
            if estimated {
                // The server reported no usage: say that the figure is lathe's estimate.
                let mut meta = serde_json::Map::new();
                meta.insert("lathe".to_owned(), serde_json::json!({ "estimated": true }));
                update = update.meta(meta);
            }
            SessionUpdate::UsageUpdate(update)
        }
    }
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
