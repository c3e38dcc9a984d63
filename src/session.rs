//! Session state: identity, roots, the conversation with the model, and the
//! running turn's cancellation token.
//!
//! A session runs at most one turn at a time. The conversation sits behind an
//! async mutex that the running turn holds for its whole life, so "is a turn
//! running" and "who may touch the history" are the same fact. The turn's
//! token is registered before the turn task starts, so a `session/cancel` that
//! arrives right after `session/prompt` always finds it. This module knows
//! nothing of ACP or the model API beyond the message type.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use crate::model::Message;
use crate::permission::{Mode, Policy};

/// The conversation sent to the model.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    /// Built once when the session starts, so every request shares its bytes.
    pub system_prompt: String,
    /// Everything after the system prompt.
    pub messages: Vec<Message>,
    /// Every tool-call id used so far: ACP wants them unique within the session.
    pub tool_call_ids: HashSet<String>,
}

/// Where a session works and what it was given.
#[derive(Debug, Clone)]
pub struct SessionSetup {
    /// The working directory, absolute.
    pub cwd: PathBuf,
    /// Further roots the session may work in, absolute.
    pub additional_directories: Vec<PathBuf>,
    /// The MCP servers the client passed, as sent (connected in a later stage).
    pub mcp_servers: Vec<serde_json::Value>,
    /// Key of the configured model this session uses.
    pub model_key: String,
}

/// One session.
#[derive(Debug)]
pub struct Session {
    id: Arc<str>,
    setup: SessionSetup,
    /// Cancelled when the session (or the whole process) goes away.
    token: CancellationToken,
    conversation: Arc<tokio::sync::Mutex<Conversation>>,
    turn: Mutex<Option<CancellationToken>>,
    policy: Mutex<Policy>,
}

/// A running turn's hold on its session: the conversation, exclusively, and
/// the token that cancels the turn. Dropping it ends the turn's registration.
pub struct TurnGuard {
    session: Arc<Session>,
    token: CancellationToken,
    conversation: OwnedMutexGuard<Conversation>,
}

impl Session {
    /// A new session whose token is a child of `parent`.
    pub fn new(id: Arc<str>, setup: SessionSetup, system_prompt: String, parent: &CancellationToken) -> Self {
        Self {
            id,
            setup,
            token: parent.child_token(),
            conversation: Arc::new(tokio::sync::Mutex::new(Conversation {
                system_prompt,
                messages: Vec::new(),
                tool_call_ids: HashSet::new(),
            })),
            turn: Mutex::new(None),
            policy: Mutex::new(Policy::new(Mode::Ask)),
        }
    }

    /// The permission policy (mode and remembered answers).
    pub fn policy(&self) -> &Mutex<Policy> {
        &self.policy
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.policy.lock().unwrap_or_else(PoisonError::into_inner).mode()
    }

    /// Switches the mode; the next tool call is judged by it.
    pub fn set_mode(&self, mode: Mode) {
        self.policy.lock().unwrap_or_else(PoisonError::into_inner).set_mode(mode);
    }

    /// The session roots: the cwd, then the additional directories.
    pub fn roots(&self) -> Vec<PathBuf> {
        std::iter::once(self.setup.cwd.clone()).chain(self.setup.additional_directories.iter().cloned()).collect()
    }

    /// The session id.
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// Where the session works.
    pub fn setup(&self) -> &SessionSetup {
        &self.setup
    }

    /// Starts a turn if none is running: registers its token and takes the
    /// conversation. `None` when a turn is already running.
    pub fn begin_turn(self: &Arc<Self>) -> Option<TurnGuard> {
        let conversation = Arc::clone(&self.conversation).try_lock_owned().ok()?;
        let token = self.token.child_token();
        *self.turn_slot() = Some(token.clone());
        Some(TurnGuard { session: Arc::clone(self), token, conversation })
    }

    /// Cancels the running turn, if any. A no-op otherwise: it never affects a later turn.
    pub fn cancel_turn(&self) {
        if let Some(token) = self.turn_slot().as_ref() {
            token.cancel();
        }
    }

    /// Cancels everything the session is doing, now and for good.
    pub fn close(&self) {
        self.token.cancel();
    }

    fn turn_slot(&self) -> std::sync::MutexGuard<'_, Option<CancellationToken>> {
        self.turn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TurnGuard {
    /// The turn's cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The conversation, exclusively.
    pub fn conversation(&mut self) -> &mut Conversation {
        &mut self.conversation
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        // The slot can only hold this turn's token: the next turn cannot begin
        // before the conversation guard (dropped after this body) is released.
        *self.session.turn_slot() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Arc<Session> {
        let setup = SessionSetup {
            cwd: PathBuf::from("/p"),
            additional_directories: vec![],
            mcp_servers: vec![],
            model_key: "m".into(),
        };
        Arc::new(Session::new(Arc::from("s1"), setup, "system".into(), &CancellationToken::new()))
    }

    #[test]
    fn one_turn_at_a_time() {
        let session = session();
        let turn = session.begin_turn().unwrap();
        assert!(session.begin_turn().is_none());
        drop(turn);
        assert!(session.begin_turn().is_some());
    }

    #[test]
    fn cancel_reaches_the_running_turn_only() {
        let session = session();
        session.cancel_turn(); // idle: a no-op
        let turn = session.begin_turn().unwrap();
        assert!(!turn.token().is_cancelled(), "an earlier cancel must not poison the next turn");
        session.cancel_turn();
        assert!(turn.token().is_cancelled());
        drop(turn);
        let next = session.begin_turn().unwrap();
        assert!(!next.token().is_cancelled());
    }

    #[test]
    fn closing_cancels_the_turn() {
        let session = session();
        let turn = session.begin_turn().unwrap();
        session.close();
        assert!(turn.token().is_cancelled());
    }
}
