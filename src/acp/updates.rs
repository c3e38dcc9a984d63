//! Agent events -> `session/update` notifications, sent to the editor and
//! recorded in the session's journal.
//!
//! The ACP shapes of the events (and of the tool types the editor sees:
//! kinds, locations, content) are `crate::present::record`'s, which the
//! terminal front end records with too; text made safe to show is
//! `crate::present::text`'s. Both are re-exported here for this module's
//! neighbours.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{SessionId, SessionNotification, SessionUpdate};

use crate::agent::{AgentEvent, EventSink};
use crate::present::record::streamed_text;
pub use crate::present::record::{
    COMPACTION_THOUGHT, Offers, Out, PLAN_ID, fields, location, markdown_plan, parent_call_meta, record,
    subagent_session_id, to_updates, tool_content, tool_kind,
};
pub use crate::present::text::{Lines, shown};
use crate::rpc::{Outbox, encode_notification};
use crate::session::Journal;
use crate::store::Chunk;

/// Sends one session's agent events as `session/update` notifications, and
/// records each in the session's journal so that `session/load` can replay
/// exactly what the user saw: streamed plain-text chunks as their text (the
/// store merges a message's chunks into one record, and the replay sends
/// them as one chunk), every other update byte for byte.
pub struct SessionEvents {
    /// The connection.
    pub outbox: Outbox,
    /// The session the events belong to.
    pub session_id: SessionId,
    /// Where the session's records go, if it is persisted.
    pub journal: Option<Journal>,
    /// Which of the newer updates the client shows.
    pub offers: Offers,
}

impl SessionEvents {
    /// Sends (and records) one update.
    pub fn send(&self, update: SessionUpdate) {
        let Some(journal) = &self.journal else {
            if let Some(line) = self.encode(update) {
                self.outbox.send_encoded(line);
            }
            return;
        };
        let chunk = streamed_text(&update);
        let Some(line) = self.encode(update) else { return };
        match chunk {
            // The editor first: the journal's copy, and waking its thread,
            // stay off the path every streamed token takes to the screen.
            Some(chunk) => {
                self.outbox.send_encoded(line);
                journal.record_chunk(chunk);
            }
            None => {
                let mut kept = Vec::with_capacity(line.len() + 1);
                kept.extend_from_slice(&line);
                self.outbox.send_encoded(line);
                journal.record_update_line(kept);
            }
        }
    }

    /// Records an update without sending it (what the user typed: the editor shows it already).
    pub fn record_only(&self, update: SessionUpdate) {
        let Some(journal) = &self.journal else { return };
        match streamed_text(&update) {
            Some(chunk) => journal.record_chunk(chunk),
            None => {
                if let Some(line) = self.encode(update) {
                    journal.record_update_line(line);
                }
            }
        }
    }

    /// Sends an update without recording it (state that is not conversation: commands, options, mode).
    pub fn send_unrecorded(&self, update: SessionUpdate) {
        if let Some(line) = self.encode(update) {
            self.outbox.send_encoded(line);
        }
    }

    /// Sends (and records, in this session's journal) an update of a
    /// sub-agent's session; its text chunks are merged as the session's own
    /// are, and replayed under that session's id.
    pub fn send_as(&self, session: SessionId, update: SessionUpdate) {
        let chunk = self.journal.as_ref().and_then(|_| streamed_text(&update));
        let notification = SessionNotification::new(session, update);
        let line = match encode_notification("session/update", &notification) {
            Ok(line) => line,
            Err(err) => return tracing::error!(%err, "cannot encode a session update"),
        };
        if let Some(journal) = &self.journal {
            match chunk {
                Some(chunk) => {
                    journal.record_chunk(Chunk { session: Some(Arc::clone(&notification.session_id.0)), ..chunk })
                }
                None => journal.record_update_line(line.clone()),
            }
        }
        self.outbox.send_encoded(line);
    }

    fn encode(&self, update: SessionUpdate) -> Option<Vec<u8>> {
        let notification = SessionNotification::new(self.session_id.clone(), update);
        match encode_notification("session/update", &notification) {
            Ok(line) => Some(line),
            Err(err) => {
                tracing::error!(%err, "cannot encode a session update");
                None
            }
        }
    }
}

impl EventSink for SessionEvents {
    fn emit(&self, event: AgentEvent) {
        for out in to_updates(event, self.offers, &self.session_id) {
            match out {
                Out::History(update) => self.send(update),
                Out::Live(update) => self.send_unrecorded(update),
                Out::Child(session, update) => self.send_as(session, update),
            }
        }
    }
}
