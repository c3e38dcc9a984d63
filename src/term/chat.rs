//! `lathe chat`: an interactive session on a terminal. A line editor with
//! history (kept in the data directory) and completion of the slash
//! commands editors get; answers rendered as Markdown; a spinner until the
//! first token; the plan as a checklist; diffs coloured. Ctrl-C cancels the
//! running turn (at the prompt it clears the line, and a second Ctrl-C in a
//! row quits); Ctrl-D quits.

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

use super::approve::TermApprover;
use super::events::Output;
use super::style::{self, Paint};
use super::{Engine, SessionArgs, TermEvents, exit};
use crate::agent::StopReason;
use crate::commands::SlashCommand;
use crate::config::Config;
use crate::permission::Mode;
use crate::present::text::{Lines, shown};
use crate::session::Session;

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
    style::err_line(&paint.dim("Ctrl-C cancels a turn, Ctrl-D or Ctrl-C twice quits; type / and Tab for commands."));
    if let Some((title, text)) = engine.sandbox_notice(&session) {
        style::warn_line(&format!("{title}: {text}"));
    }
    let commands = engine.commands(&session.setup().cwd);
    // Like a shell: Tab completes as far as the commands agree, a second Tab lists them.
    let settings = rustyline::Config::builder().completion_type(rustyline::CompletionType::List).build();
    let mut editor: Editor<Commands, DefaultHistory> = match Editor::with_config(settings) {
        Ok(editor) => editor,
        Err(err) => {
            style::warn_line(&format!("cannot start the line editor: {err}"));
            return exit::ERROR;
        }
    };
    editor.set_helper(Some(Commands(commands)));
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
                runtime.block_on(turn(&engine, &session, line));
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

/// One prompt: the spinner, the turn, Ctrl-C cancelling it, how it ended.
async fn turn(engine: &Engine, session: &Arc<Session>, line: String) {
    let events = TermEvents::new(session.id(), session.journal().cloned(), Output::Chat);
    let approver = TermApprover { screen: events.screen(), session: Arc::clone(session) };
    events.waiting();
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
        }
    };
    events.finish();
    let paint = Paint::stderr();
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
