//! Session state: identity, roots, the conversation with the model, what the
//! editor can switch (model, reasoning effort, mode), and the turns that are
//! running or waiting.
//!
//! A session runs one turn at a time. The conversation sits behind an async
//! mutex that the running turn holds for its whole life, so "is a turn
//! running" and "who may touch the history" are the same fact. A prompt that
//! arrives while a turn runs is queued: its turn waits for the mutex (tokio's
//! mutex is fair, so prompts run in arrival order). Every turn's token, running
//! or queued, is registered before its task starts, so a `session/cancel` that
//! arrives right after `session/prompt` always finds it, and cancels the
//! queued ones too.
//!
//! Every change to the conversation goes through [`Conversation`]'s methods,
//! which also write it to the session's [`Journal`] (if it has one), so the
//! transcript on disk follows the one in memory as the turn runs. This module
//! knows nothing of ACP or the model API beyond the message type.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use crate::model::Message;
use crate::permission::{Mode, Policy};
use crate::store::{Record, Store};

/// Where a session's records go on disk.
#[derive(Debug, Clone)]
pub struct Journal {
    store: Arc<Store>,
    session_id: Arc<str>,
}

impl Journal {
    /// The journal of session `session_id` in `store`.
    pub fn new(store: Arc<Store>, session_id: Arc<str>) -> Self {
        Self { store, session_id }
    }

    /// Appends one record.
    pub fn record(&self, record: &Record) {
        self.store.append(&self.session_id, record);
    }

    /// Appends one `session/update` line exactly as it was sent.
    pub fn record_update_line(&self, line: Vec<u8>) {
        self.store.append_raw_update(&self.session_id, line);
    }

    /// Appends streamed text, merged with the chunks of its message.
    pub fn record_chunk(&self, chunk: crate::store::Chunk) {
        self.store.append_chunk(&self.session_id, chunk);
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

/// The conversation sent to the model.
#[derive(Debug, Default)]
pub struct Conversation {
    /// Built once when the session starts, so every request shares its bytes.
    pub system_prompt: crate::prompt::SystemPrompt,
    messages: Vec<Message>,
    /// Every tool-call id used so far: ACP wants them unique within the session.
    pub tool_call_ids: HashSet<String>,
    /// The last exact token count, to estimate the next request's size from.
    pub usage_mark: Option<UsageMark>,
    /// Tokens the current turn's model requests used, summed over the
    /// requests whose server reported usage; `None` when none did.
    pub turn_usage: Option<crate::model::Usage>,
    /// The user was told that the model takes no tools (told once per session).
    pub told_chat_only: bool,
    journal: Option<Journal>,
}

/// Where the last exact usage figure stood: tokens, and how many messages
/// the conversation had then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageMark {
    /// Tokens the server counted for the last request and its answer.
    pub tokens: u64,
    /// The number of messages at that point.
    pub messages: usize,
}

impl Conversation {
    /// A conversation with these messages, journaled to `journal`.
    pub fn new(system_prompt: crate::prompt::SystemPrompt, messages: Vec<Message>, journal: Option<Journal>) -> Self {
        let mut tool_call_ids = HashSet::new();
        for message in &messages {
            match message {
                Message::Assistant { tool_calls, .. } => tool_call_ids.extend(tool_calls.iter().map(|c| c.id.clone())),
                Message::User { .. } | Message::Tool { .. } => {}
            }
        }
        Self {
            system_prompt,
            messages,
            tool_call_ids,
            usage_mark: None,
            turn_usage: None,
            told_chat_only: false,
            journal,
        }
    }

    /// Everything after the system prompt.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Appends a message.
    pub fn push(&mut self, message: Message) {
        if let Some(journal) = &self.journal {
            journal.record(&Record::Message(message.clone()));
        }
        self.messages.push(message);
    }

    /// Replaces every message (compaction, `/clear`).
    pub fn reset(&mut self, messages: Vec<Message>) {
        if let Some(journal) = &self.journal {
            journal.record(&Record::Reset(messages.clone()));
        }
        self.messages = messages;
        // The old count described other messages.
        self.usage_mark = None;
    }

    /// Drops every message from `len` on.
    pub fn truncate(&mut self, len: usize) {
        if len < self.messages.len() {
            let kept = self.messages[..len].to_vec();
            self.reset(kept);
        }
    }
}

/// Where a session works and what it was given.
#[derive(Debug, Clone)]
pub struct SessionSetup {
    /// The working directory, absolute.
    pub cwd: PathBuf,
    /// Further roots the session may work in, absolute.
    pub additional_directories: Vec<PathBuf>,
    /// The MCP servers the client passed, as sent.
    pub mcp_servers: Vec<serde_json::Value>,
    /// When the session was first created (RFC 3339).
    pub created_at: String,
}

/// What the editor can switch besides the mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choices {
    /// Key of the configured model the session uses.
    pub model_key: String,
    /// Reasoning effort sent with requests, when the model takes one.
    pub thought_level: Option<String>,
}

/// One session.
#[derive(Debug)]
pub struct Session {
    id: Arc<str>,
    setup: SessionSetup,
    /// Cancelled when the session (or the whole process) goes away.
    token: CancellationToken,
    conversation: Arc<tokio::sync::Mutex<Conversation>>,
    /// Tokens of the running turn and of queued ones, by turn number.
    turns: Mutex<Vec<(u64, CancellationToken)>>,
    next_turn: AtomicU64,
    /// Which turn number may run, in the order prompts arrived.
    queue: Mutex<QueueState>,
    /// Woken whenever the turn allowed to run changes.
    queue_moved: tokio::sync::Notify,
    policy: Mutex<Policy>,
    choices: Mutex<Choices>,
    title: Mutex<Option<String>>,
    journal: Option<Journal>,
    seen: crate::tools::versions::FileVersions,
    /// The session's MCP tools, once its servers are being connected.
    external: std::sync::OnceLock<Arc<dyn crate::tools::ExternalTools>>,
}

/// A prompt's turn, registered (so it can be cancelled) but not yet running.
pub struct QueuedTurn {
    session: Arc<Session>,
    number: u64,
    token: CancellationToken,
    /// Set once [`QueuedTurn::start`] has handed the registration on.
    handed_over: bool,
}

/// A running turn's hold on its session: the conversation, exclusively, and
/// the token that cancels the turn. Dropping it unregisters the turn.
pub struct TurnGuard {
    session: Arc<Session>,
    number: u64,
    token: CancellationToken,
    conversation: OwnedMutexGuard<Conversation>,
}

/// Turns run strictly in the order they were enqueued: `serving` is the
/// number of the turn that may run; numbers of turns cancelled while queued
/// are skipped when their time comes.
#[derive(Debug, Default)]
struct QueueState {
    serving: u64,
    abandoned: std::collections::BTreeSet<u64>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Session {
    /// A session whose token is a child of `parent`.
    pub fn new(
        id: Arc<str>,
        setup: SessionSetup,
        conversation: Conversation,
        choices: Choices,
        mode: Mode,
        parent: &CancellationToken,
    ) -> Self {
        let journal = conversation.journal.clone();
        Self {
            id,
            setup,
            token: parent.child_token(),
            conversation: Arc::new(tokio::sync::Mutex::new(conversation)),
            turns: Mutex::new(Vec::new()),
            next_turn: AtomicU64::new(0),
            queue: Mutex::new(QueueState::default()),
            queue_moved: tokio::sync::Notify::new(),
            policy: Mutex::new(Policy::new(mode)),
            choices: Mutex::new(choices),
            title: Mutex::new(None),
            journal,
            seen: crate::tools::versions::FileVersions::default(),
            external: std::sync::OnceLock::new(),
        }
    }

    /// A token cancelled when the session goes away (closed, deleted,
    /// replaced, or lathe exits): for what lives as long as the session.
    pub fn lifetime(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// Gives the session its external (MCP) tools; only the first call counts.
    pub fn set_external_tools(&self, tools: Arc<dyn crate::tools::ExternalTools>) {
        if self.external.set(tools).is_err() {
            tracing::warn!(session = %self.id, "the session already has its external tools");
        }
    }

    /// The session's external (MCP) tools, if it has MCP servers.
    pub fn external_tools(&self) -> Option<Arc<dyn crate::tools::ExternalTools>> {
        self.external.get().cloned()
    }

    /// The session id.
    pub fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// Where the session works.
    pub fn setup(&self) -> &SessionSetup {
        &self.setup
    }

    /// Where its records go, if it is persisted.
    pub fn journal(&self) -> Option<&Journal> {
        self.journal.as_ref()
    }

    /// The session roots: the cwd, then the additional directories.
    pub fn roots(&self) -> Vec<PathBuf> {
        std::iter::once(self.setup.cwd.clone()).chain(self.setup.additional_directories.iter().cloned()).collect()
    }

    /// The file versions the model has seen, so edits notice changes made behind its back.
    pub fn file_versions(&self) -> &crate::tools::versions::FileVersions {
        &self.seen
    }

    /// The permission policy (mode and remembered answers).
    pub fn policy(&self) -> &Mutex<Policy> {
        &self.policy
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        lock(&self.policy).mode()
    }

    /// Switches the mode; the next tool call is judged by it.
    pub fn set_mode(&self, mode: Mode) {
        lock(&self.policy).set_mode(mode);
    }

    /// The current model and reasoning effort.
    pub fn choices(&self) -> Choices {
        lock(&self.choices).clone()
    }

    /// Switches model and reasoning effort; the next model request uses them.
    pub fn set_choices(&self, choices: Choices) {
        *lock(&self.choices) = choices;
    }

    /// The title, once there is one.
    pub fn title(&self) -> Option<String> {
        lock(&self.title).clone()
    }

    /// Sets the title; returns whether it changed.
    pub fn set_title(&self, title: Option<String>) -> bool {
        let mut current = lock(&self.title);
        let changed = *current != title;
        *current = title;
        changed
    }

    /// Registers a turn for a prompt: from now on a cancel reaches it.
    pub fn enqueue_turn(self: &Arc<Self>) -> QueuedTurn {
        let token = self.token.child_token();
        let number = self.next_turn.fetch_add(1, Ordering::Relaxed);
        lock(&self.turns).push((number, token.clone()));
        QueuedTurn { session: Arc::clone(self), number, token, handed_over: false }
    }

    /// Whether a turn is running or waiting.
    pub fn is_busy(&self) -> bool {
        !lock(&self.turns).is_empty()
    }

    /// Cancels the running turn and every queued one. A no-op when idle: it
    /// never affects a later turn.
    pub fn cancel_turns(&self) {
        for (_, token) in lock(&self.turns).iter() {
            token.cancel();
        }
    }

    /// Cancels everything the session is doing, now and for good.
    pub fn close(&self) {
        self.token.cancel();
    }

    /// Waits until no turn holds the conversation: after a cancel, until
    /// the running turn has wound down (and queued its last records).
    pub async fn idle(&self) {
        drop(self.conversation.lock().await);
    }

    /// Takes the conversation while no turn runs (for replay and commands
    /// outside a turn). `None` while a turn holds it.
    pub fn try_conversation(&self) -> Option<tokio::sync::MutexGuard<'_, Conversation>> {
        self.conversation.try_lock().ok()
    }

    fn unregister(&self, number: u64) {
        lock(&self.turns).retain(|(n, _)| *n != number);
    }

    /// Whether turn `number` may run now.
    fn is_serving(&self, number: u64) -> bool {
        lock(&self.queue).serving == number
    }

    /// Turn `number` is over (it ran, or it was cancelled while queued): let the next one run.
    fn leave_queue(&self, number: u64) {
        {
            let mut queue = lock(&self.queue);
            queue.abandoned.insert(number);
            loop {
                let serving = queue.serving;
                if !queue.abandoned.remove(&serving) {
                    break;
                }
                queue.serving += 1;
            }
        }
        self.queue_moved.notify_waiters();
    }
}

impl QueuedTurn {
    /// The turn's cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Waits for the earlier turns to finish, then takes the conversation.
    /// `None` if the turn was cancelled while it waited.
    pub async fn start(mut self) -> Option<TurnGuard> {
        // Wait for our number, not merely for the lock: tasks are polled in
        // no particular order, and prompts must run in the order they came.
        loop {
            let moved = self.session.queue_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if self.session.is_serving(self.number) {
                break;
            }
            tokio::select! {
                biased;
                // A cancelled turn leaves the queue when this value drops.
                () = self.token.cancelled() => return None,
                () = moved => {}
            }
        }
        // The previous turn releases the conversation a moment after it lets
        // us go. A cancel while we wait for it still means "never started".
        let conversation = tokio::select! {
            biased;
            () = self.token.cancelled() => return None,
            conversation = Arc::clone(&self.session.conversation).lock_owned() => conversation,
        };
        self.handed_over = true;
        Some(TurnGuard {
            session: Arc::clone(&self.session),
            number: self.number,
            token: self.token.clone(),
            conversation,
        })
    }
}

impl Drop for QueuedTurn {
    fn drop(&mut self) {
        if !self.handed_over {
            self.session.unregister(self.number);
            self.session.leave_queue(self.number);
        }
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

    /// The session.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.session.unregister(self.number);
        self.session.leave_queue(self.number);
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
            created_at: String::new(),
        };
        let choices = Choices { model_key: "m".into(), thought_level: None };
        let conversation = Conversation::new("system".into(), Vec::new(), None);
        Arc::new(Session::new(Arc::from("s1"), setup, conversation, choices, Mode::Ask, &CancellationToken::new()))
    }

    #[tokio::test]
    async fn turns_run_one_at_a_time_in_order() {
        let session = session();
        let first = session.enqueue_turn().start().await.unwrap();
        let second = session.enqueue_turn();
        let waiting = tokio::spawn(second.start());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the second turn waits for the first");
        drop(first);
        let second = waiting.await.unwrap().unwrap();
        assert!(!second.token().is_cancelled());
        drop(second);
        assert!(!session.is_busy());
    }

    #[tokio::test]
    async fn queued_turns_start_in_arrival_order_whatever_the_polling_order() {
        let session = session();
        let first = session.enqueue_turn();
        let second = session.enqueue_turn();
        let third = session.enqueue_turn();
        // Poll the later ones first.
        let third = tokio::spawn(third.start());
        let second = tokio::spawn(second.start());
        tokio::task::yield_now().await;
        let first = first.start().await.unwrap();
        assert!(!second.is_finished() && !third.is_finished());
        drop(first);
        let second = second.await.unwrap().unwrap();
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "the third waits for the second");
        drop(second);
        assert!(third.await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_cancelled_queued_turn_is_skipped() {
        let session = session();
        let running = session.enqueue_turn().start().await.unwrap();
        let doomed = session.enqueue_turn();
        let doomed_token = doomed.token().clone();
        let next = tokio::spawn(session.enqueue_turn().start());
        doomed_token.cancel();
        assert!(doomed.start().await.is_none());
        drop(running);
        assert!(next.await.unwrap().is_some(), "the turn after a cancelled one still runs");
    }

    #[tokio::test]
    async fn cancel_reaches_running_and_queued_turns_only() {
        let session = session();
        session.cancel_turns(); // idle: a no-op
        let running = session.enqueue_turn().start().await.unwrap();
        assert!(!running.token().is_cancelled(), "an earlier cancel must not poison the next turn");
        let queued = session.enqueue_turn();
        let queued_token = queued.token().clone();
        let waiting = tokio::spawn(queued.start());
        session.cancel_turns();
        assert!(running.token().is_cancelled());
        assert!(queued_token.is_cancelled());
        assert!(waiting.await.unwrap().is_none(), "a cancelled queued turn never starts");
        drop(running);
        assert!(!session.is_busy());
        let next = session.enqueue_turn().start().await.unwrap();
        assert!(!next.token().is_cancelled());
    }

    /// A turn whose number has come but whose conversation is still held
    /// (by the turn before, winding down) is cancelled, not started.
    #[tokio::test]
    async fn a_turn_cancelled_while_the_conversation_is_held_never_starts() {
        let session = session();
        let held = Arc::clone(&session.conversation).lock_owned().await;
        let queued = session.enqueue_turn();
        let token = queued.token().clone();
        let waiting = tokio::spawn(queued.start());
        tokio::task::yield_now().await;
        session.cancel_turns();
        assert!(token.is_cancelled());
        let started = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await;
        assert!(started.expect("the cancelled turn gives up at once").unwrap().is_none());
        drop(held);
        assert!(!session.is_busy());
        tokio::time::timeout(std::time::Duration::from_secs(5), session.idle()).await.unwrap();
    }

    #[tokio::test]
    async fn closing_cancels_the_turn() {
        let session = session();
        let turn = session.enqueue_turn().start().await.unwrap();
        session.close();
        assert!(turn.token().is_cancelled());
    }
}
