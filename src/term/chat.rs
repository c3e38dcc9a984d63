//! `lathe chat`: an interactive session on a terminal. A line editor with
//! history (kept in the data directory) and completion of the slash
//! commands editors get; answers rendered as Markdown; a spinner until the
//! first token; the plan as a checklist; diffs coloured. Ctrl-C cancels the
//! running turn (at the prompt it clears the line, and a second Ctrl-C in a
//! row quits); Ctrl-D quits.
//!
//! While a turn runs, what the user types is read too: a line ended with
//! Enter steers the turn (the model reads it before its next request; see
//! [`crate::session::Session::steer`]), one ended with Alt-Enter waits and
//! is sent as the next prompt once the turn is over. Enter steers because
//! that is what typing at a running agent usually means (and what Codex
//! does); Alt-Enter is the key terminals send with a mark of their own
//! (ESC, then Enter) that a line read without taking the terminal over
//! (the turn's output keeps streaming) can still tell apart. `/plan`
//! switches to plan mode (`/plan <prompt>` also sends the prompt).

use std::borrow::Cow;
use std::io::IsTerminal;
use std::sync::Arc;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::approve::TermApprover;
use super::events::Output;
use super::style::{self, Paint};
use super::{Engine, SessionArgs, TermEvents, exit};
use crate::agent::StopReason;
use crate::commands::SlashCommand;
use crate::config::Config;
use crate::model::UserPart;
use crate::permission::Mode;
use crate::present::text::{Lines, shown};
use crate::session::{Session, Steered};

/// `lathe chat`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ChatArgs {
    /// Which session, model and mode.
    #[command(flatten)]
    pub session: SessionArgs,
}

/// The history file, in the data directory.
const HISTORY_FILE: &str = "chat_history";

/// Runs `lathe chat` on this terminal; returns the exit code. Blocking: it
/// reads lines here and runs each turn on `runtime`.
pub fn chat(config: Config, args: ChatArgs, runtime: &tokio::runtime::Runtime) -> u8 {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        style::warn_line(
            "lathe chat needs a terminal on stdin and stdout; for scripts and pipes use `lathe exec \"prompt\"`",
        );
        return exit::USAGE;
    }
    let history = config.data_dir.as_ref().map(|dir| dir.join(HISTORY_FILE));
    let mode = args.session.mode.unwrap_or(Mode::Ask);
    let engine = runtime.block_on(Engine::start(config));
    let session = match runtime.block_on(engine.open(&args.session, mode)) {
        Ok(session) => session,
        Err(err) => {
            style::warn_line(&err.to_string());
            return exit::USAGE;
        }
    };
    let paint = Paint::stderr();
    let choices = session.choices();
    style::err_line(&format!(
        "{} {}",
        paint.bold("lathe chat"),
        paint.dim(&format!("· session {} · model {} · mode {}", session.id(), choices.model_key, session.mode().id()))
    ));
    style::err_line(&paint.dim(
        "Ctrl-C cancels a turn, Ctrl-D or Ctrl-C twice quits; type / and Tab for commands. While a turn runs, Enter \
         steers it and Alt-Enter queues the next prompt.",
    ));
    if let Some((title, text)) = engine.sandbox_notice(&session) {
        style::warn_line(&format!("{title}: {text}"));
    }
    let commands = engine.commands(&session);
    // Like a shell: Tab completes as far as the commands agree, a second Tab lists them.
    let settings = rustyline::Config::builder().completion_type(rustyline::CompletionType::List).build();
    let mut editor: Editor<Commands, DefaultHistory> = match Editor::with_config(settings) {
        Ok(editor) => editor,
        Err(err) => {
            style::warn_line(&format!("cannot start the line editor: {err}"));
            return exit::ERROR;
        }
    };
    let mut commands = commands;
    commands.push(SlashCommand {
        name: "plan".to_owned(),
        description: "Plan first: switch to plan mode (and send the prompt, if one follows)".to_owned(),
        hint: Some("[prompt]".to_owned()),
        kind: crate::commands::CommandKind::Mode,
    });
    editor.set_helper(Some(Commands(commands)));
    let input = Arc::new(tokio::sync::Mutex::new(()));
    if let Some(path) = &history {
        // A first run has none yet.
        let _ = editor.load_history(path);
    }
    // Ctrl-C at the prompt clears the line; a second one in a row quits (as
    // in Claude Code and Codex), so a user who expects Ctrl-C to leave is
    // not stuck, and one who pressed it once to clear a line loses nothing.
    let mut interrupted = false;
    loop {
        match editor.readline("› ") {
            Ok(line) => {
                interrupted = false;
                if line.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                if let Some(path) = &history
                    && let Err(err) = editor.save_history(path)
                {
                    tracing::debug!(%err, "cannot save the chat history");
                }
                let mut prompts = std::collections::VecDeque::from([line]);
                while let Some(prompt) = prompts.pop_front() {
                    let Some(prompt) = plan_command(&engine, &session, prompt) else { continue };
                    let after = runtime.block_on(turn(&engine, &session, prompt, &input));
                    if after.cancelled {
                        for unsent in after.queued.into_iter().chain(prompts.drain(..)) {
                            style::err_line(&paint.dim(&format!("not sent (the turn was cancelled): {unsent}")));
                            let _ = editor.add_history_entry(unsent.as_str());
                        }
                        break;
                    }
                    // Steers the turn ended before reading go first, as the
                    // next prompt; then what was queued, in order.
                    let waiting = steer_text(session.steers().take());
                    for text in after.queued.into_iter().rev() {
                        prompts.push_front(text);
                    }
                    if !waiting.is_empty() {
                        prompts.push_front(waiting);
                    }
                }
            }
            Err(ReadlineError::Interrupted) if interrupted => break,
            Err(ReadlineError::Interrupted) => {
                interrupted = true;
                style::err_line(&paint.dim("Press Ctrl-C again to quit (or Ctrl-D)."));
            }
            Err(ReadlineError::Eof) => break,
            Err(err) => {
                style::warn_line(&format!("reading the line failed: {err}"));
                runtime.block_on(engine.finish(&session));
                return exit::ERROR;
            }
        }
    }
    runtime.block_on(engine.finish(&session));
    exit::OK
}

/// `/plan [prompt]`: switches to plan mode; gives back the prompt to send,
/// if any (any other line is given back as it is).
fn plan_command(engine: &Engine, session: &Session, line: String) -> Option<String> {
    let rest = match line.trim_start().strip_prefix("/plan") {
        Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => rest.trim().to_owned(),
        _ => return Some(line),
    };
    session.set_mode(Mode::Plan);
    engine.save_meta(session);
    style::err_line(&Paint::stderr().dim("mode: plan (read and search, then a plan to approve)"));
    (!rest.is_empty()).then_some(rest)
}

/// The text of steering messages, joined, as a prompt.
fn steer_text(steers: Vec<Vec<UserPart>>) -> String {
    let texts: Vec<String> = steers
        .into_iter()
        .flatten()
        .filter_map(|part| match part {
            UserPart::Text { text } => Some(text),
            UserPart::Image { .. } => None,
        })
        .collect();
    texts.join("\n\n")
}

/// How a turn ended, for what comes next.
struct After {
    /// The user cancelled it.
    cancelled: bool,
    /// Prompts typed (Alt-Enter) while it ran, in order.
    queued: Vec<String>,
}

/// A line typed while a turn runs.
enum Typed {
    /// Enter: steer the turn.
    Steer(String),
    /// Alt-Enter: the next prompt.
    Queue(String),
}

/// One prompt: the spinner, the turn, Ctrl-C cancelling it, how it ended;
/// lines typed meanwhile steer it or wait for it (see the module doc).
async fn turn(engine: &Engine, session: &Arc<Session>, line: String, input: &Arc<tokio::sync::Mutex<()>>) -> After {
    let events = TermEvents::new(session.id(), session.journal().cloned(), Output::Chat);
    let approver = TermApprover { screen: events.screen(), session: Arc::clone(session), input: Arc::clone(input) };
    events.waiting();
    let (typed_tx, mut typed) = tokio::sync::mpsc::unbounded_channel();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, input) = (Arc::clone(&stop), Arc::clone(input));
        std::thread::Builder::new()
            .name("lathe-chat-input".to_owned())
            .spawn(move || read_typed(&stop, &input, &typed_tx))
    };
    let mut queued = Vec::new();
    let prompted = engine.prompt(session, line, &events, &approver);
    tokio::pin!(prompted);
    // Not or_cancel: Ctrl-C is the source of the cancel here, not a wait to
    // abandon; each press cancels the session's turns and the turn is awaited
    // on until it answers (cancelled), so nothing is dropped half-way.
    let prompted = loop {
        tokio::select! {
            prompted = &mut prompted => break prompted,
            interrupted = tokio::signal::ctrl_c() => {
                if interrupted.is_err() {
                    break prompted.await;
                }
                session.cancel_turns();
            }
            Some(line) = typed.recv() => match line {
                Typed::Steer(text) => match session.steer(vec![UserPart::Text { text: text.clone() }]) {
                    // Shown when the model reads it.
                    Steered::Queued => {}
                    Steered::Idle(_) => queued.insert(0, text),
                },
                Typed::Queue(text) => {
                    style::err_line(&Paint::stderr().dim(&format!("queued: {}", shown(&text, Lines::One))));
                    queued.push(text);
                }
            },
        }
    };
    stop.store(true, Ordering::Relaxed);
    if let Ok(reader) = reader {
        let _ = reader.join();
    }
    // A line typed as the turn ended.
    while let Ok(line) = typed.try_recv() {
        match line {
            Typed::Steer(text) => queued.insert(0, text),
            Typed::Queue(text) => queued.push(text),
        }
    }
    events.finish();
    let paint = Paint::stderr();
    let cancelled = matches!(prompted.result, Ok(StopReason::Cancelled));
    match prompted.result {
        Ok(StopReason::EndTurn) => {}
        Ok(StopReason::Cancelled) => style::err_line(&paint.yellow("cancelled")),
        Ok(StopReason::MaxTokens) => style::err_line(&paint.yellow("stopped: the model reached its output limit")),
        Ok(StopReason::MaxTurnRequests) => {
            style::err_line(&paint.yellow("stopped: the turn used up its model requests"))
        }
        Ok(StopReason::Refusal) => style::err_line(&paint.yellow("stopped: the model refused")),
        Err(err) => style::err_line(&format!("{} {}", paint.red("error:"), shown(&err.to_string(), Lines::Many))),
    }
    After { cancelled, queued }
}

/// Reads the lines typed while a turn runs, until `stop`. The terminal is
/// left as it is (its line discipline edits the line, and the turn's output
/// goes on), so a line arrives whole when Enter is pressed; Alt-Enter sends
/// ESC just before it. Read from stdin directly (not through crossterm's
/// event reader, which a question's key reading shares), a line at a time,
/// and only while no question holds `input`.
fn read_typed(stop: &AtomicBool, input: &tokio::sync::Mutex<()>, typed: &tokio::sync::mpsc::UnboundedSender<Typed>) {
    use crate::platform::console::{StdinReady, read_stdin, stdin_ready};
    let mut pending: Vec<u8> = Vec::new();
    let tick = Duration::from_millis(50);
    while !stop.load(Ordering::Relaxed) {
        let Ok(_reading) = input.try_lock() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        match stdin_ready(tick) {
            Ok(StdinReady::Nothing) => continue,
            Ok(StdinReady::Readable) => {}
            // Hung up or failed: nothing more will be typed.
            Ok(StdinReady::Closed) => return,
            Err(err) => {
                tracing::debug!(%err, "cannot read the terminal during a turn");
                return;
            }
        }
        let mut buffer = [0u8; 4096];
        let read = match read_stdin(&mut buffer) {
            Ok(0) => return,
            Ok(read) => read,
            Err(err) if matches!(err.kind(), std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock) => {
                continue;
            }
            Err(err) => {
                tracing::debug!(%err, "cannot read the terminal during a turn");
                return;
            }
        };
        pending.extend_from_slice(&buffer[..read]);
        while let Some(end) = pending.iter().position(|b| matches!(b, b'\n' | b'\r')) {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            let (text, queue) = match text.strip_suffix('\u{1b}') {
                Some(text) => (text.to_owned(), true),
                None => (text, false),
            };
            let text = text.trim().to_owned();
            if text.is_empty() {
                continue;
            }
            if typed.send(if queue { Typed::Queue(text) } else { Typed::Steer(text) }).is_err() {
                return;
            }
        }
    }
}

/// Completes slash commands at the start of the line.
struct Commands(Vec<SlashCommand>);

impl Completer for Commands {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = line.get(..pos).unwrap_or(line);
        let Some(typed) = before.strip_prefix('/').filter(|typed| !typed.contains(char::is_whitespace)) else {
            return Ok((0, Vec::new()));
        };
        let candidates = self
            .0
            .iter()
            .filter(|command| command.name.starts_with(typed))
            .map(|command| Pair {
                display: format!("/{} - {}", command.name, shown(&command.description, Lines::One)),
                replacement: format!("/{} ", command.name),
            })
            .collect();
        Ok((0, candidates))
    }
}

impl Hinter for Commands {
    type Hint = String;
}

impl Highlighter for Commands {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(&'s self, prompt: &'p str, _default: bool) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for Commands {}

impl Helper for Commands {}
