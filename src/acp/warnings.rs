//! Warnings for the user that are not part of the conversation: that a
//! session is not being saved, that commands run without the sandbox. Sent as an ACP `notice` when the client said
//! it shows them (`session.notices`, item 35), else as an agent message,
//! which every client shows (the schema suggests exactly this fallback).
//! Neither is written to the session log: a warning is about now, not
//! history, and a load must not replay it (item 22).

use std::sync::{Arc, OnceLock};

use agent_client_protocol_schema::v1::{
    ClientCapabilities, ContentBlock, ContentChunk, MessageId, Notice, NoticeSeverity, SessionId, SessionNotification,
    SessionUpdate,
};

use crate::rpc::{Outbox, encode_notification};
use crate::store::SaveFailure;

/// Sends warnings to the client. Cheap to clone; usable from any thread
/// (the store's writer reports through it).
#[derive(Clone)]
pub(super) struct Warnings {
    outbox: Outbox,
    capabilities: Arc<OnceLock<ClientCapabilities>>,
}

impl Warnings {
    pub(super) fn new(outbox: Outbox, capabilities: Arc<OnceLock<ClientCapabilities>>) -> Self {
        Self { outbox, capabilities }
    }

    /// Part of a session's history could not be written (a full disk, say).
    pub(super) fn save_failed(&self, failure: &SaveFailure) {
        self.warn(
            &failure.session_id,
            "This session's history is not being saved",
            &format!(
                "lathe could not write to the session's log ({}). What happens now may be missing when the \
                 session is loaded again; lathe keeps trying. Free some disk space, or check lathe's data directory.",
                failure.error
            ),
        );
    }

    /// Nothing of this session will be saved: `why` completes "lathe ...".
    pub(super) fn not_saved(&self, session_id: &str, why: &str) {
        self.warn(
            session_id,
            "Sessions are not being saved",
            &format!(
                "lathe {why}. This session works, but once it is closed it cannot be loaded again. Make the data \
                 directory writable, or choose another with --data-dir or LATHE_DATA_DIR."
            ),
        );
    }

    /// A warning with this title and text (e.g. the command sandbox's, see `crate::platform::sandbox`).
    pub(super) fn warn(&self, session_id: &str, title: &str, description: &str) {
        self.notice(session_id, NoticeSeverity::Warning, title, description);
    }

    /// Something worth knowing that is not a problem (e.g. which model
    /// server lathe found and uses, see `crate::discover`): an `info` notice,
    /// or an agent message starting "Note:".
    pub(super) fn inform(&self, session_id: &str, title: &str, description: &str) {
        self.notice(session_id, NoticeSeverity::Info, title, description);
    }

    fn notice(&self, session_id: &str, severity: NoticeSeverity, title: &str, description: &str) {
        let notices = self.capabilities.get().and_then(|c| c.session.as_ref()).is_some_and(|s| s.notices.is_some());
        let update = if notices {
            SessionUpdate::Notice(Notice::new(severity, title).description(description.to_owned()))
        } else {
            let (prefix, label) = match severity {
                NoticeSeverity::Info => ("note", "Note"),
                // Warning, Error, and severities newer than this schema.
                _ => ("warning", "Warning"),
            };
            let id = MessageId::new(format!("{prefix}_{}", uuid::Uuid::new_v4().simple()));
            let text = format!("{label}: {title}. {description}");
            SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from(text)).message_id(id))
        };
        let notification = SessionNotification::new(SessionId::new(session_id), update);
        match encode_notification("session/update", &notification) {
            Ok(line) => self.outbox.send_encoded(line),
            Err(err) => tracing::error!(%err, "cannot encode a warning"),
        }
    }
}
