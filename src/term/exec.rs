//! `lathe exec [PROMPT]`: one turn, non-interactive. The answer streams to
//! stdout; reasoning, tool calls and results are short lines on stderr; or,
//! with `--json`, one `session/update` params object per line and a final
//! result object. Ctrl-C (SIGINT, or SIGTERM/SIGHUP) cancels the turn
//! through its token: the tools stop, the partial answer stays in the
//! session, and lathe exits 130 once the session is saved. A second one
//! exits at once.

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;

use agent_client_protocol_schema::v1::{PromptResponse, Usage};
use serde_json::json;

use super::approve::TermApprover;
use super::events::Output;
use super::style::{self, Paint};
use super::{Engine, SessionArgs, TermEvents, exit};
use crate::agent::StopReason;
use crate::config::Config;
use crate::permission::Mode;
use crate::present::text::{Lines, shown};
use crate::session::Session;

/// `lathe exec`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ExecArgs {
    /// What to ask. Read from stdin when absent or `-`.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
    /// Print one JSON object per event (the ACP `session/update` params an
    /// editor would get) and a final result object, instead of text.
    #[arg(long)]
    pub json: bool,
    /// Which session, model and mode.
    #[command(flatten)]
    pub session: SessionArgs,
}

/// Runs `lathe exec`; returns the exit code.
pub async fn exec(config: Config, args: ExecArgs) -> u8 {
    let stdin_is_terminal = std::io::stdin().is_terminal();
    let prompt = match args.prompt.as_deref() {
        Some(prompt) if prompt != "-" => prompt.to_owned(),
        _ if stdin_is_terminal => {
            style::warn_line("give the prompt as an argument (lathe exec \"...\") or on stdin");
            return exit::USAGE;
        }
        _ => match tokio::task::spawn_blocking(read_stdin).await {
            Ok(Ok(prompt)) => prompt,
            Ok(Err(err)) => {
                style::warn_line(&format!("cannot read the prompt from stdin: {err}"));
                return exit::USAGE;
            }
            Err(err) => {
                style::warn_line(&format!("cannot read the prompt from stdin: {err}"));
                return exit::ERROR;
            }
        },
    };
    if prompt.trim().is_empty() {
        style::warn_line("the prompt is empty");
        return exit::USAGE;
    }
    // Nobody is there to answer a question unless stdin is a terminal.
    let mode = args.session.mode.unwrap_or(if stdin_is_terminal { Mode::Ask } else { Mode::ReadOnly });
    let engine = Engine::start(config).await;
    let session = match engine.open(&args.session, mode).await {
        Ok(session) => session,
        Err(err) => {
            style::warn_line(&err.to_string());
            return exit::USAGE;
        }
    };
    let output = if args.json { Output::Json } else { Output::Plain };
    let events = TermEvents::new(session.id(), session.journal().cloned(), output);
    if !args.json {
        let paint = Paint::stderr();
        let choices = session.choices();
        style::err_line(&paint.dim(&format!(
            "session {} · model {} · mode {}",
            session.id(),
            choices.model_key,
            mode.id()
        )));
    }
    if let Some((title, text)) = engine.sandbox_notice(&session) {
        style::warn_line(&format!("{title}: {text}"));
    }
    let input = Arc::new(tokio::sync::Mutex::new(()));
    let approver = TermApprover { screen: events.screen(), session: Arc::clone(&session), input };
    let signals = tokio::spawn(cancel_on_signals(Arc::clone(&session)));
    let prompted = engine.prompt(&session, prompt, &events, &approver).await;
    events.finish();
    engine.finish(&session).await;
    signals.abort();
    let code = super::exit_code(&prompted.result);
    if args.json {
        // The ACP shapes on purpose: a `session/prompt` response (or its
        // JSON-RPC error), so scripts and editors read one schema.
        let mut line = match &prompted.result {
            Ok(stop) => {
                let usage = prompted
                    .usage
                    .map(|u| Usage::new(u.input_tokens + u.output_tokens, u.input_tokens, u.output_tokens));
                let response = PromptResponse::new(crate::present::record::to_acp_stop_reason(*stop)).usage(usage);
                serde_json::to_value(response).unwrap_or_default()
            }
            Err(err) => json!({ "error": crate::present::record::turn_error_to_rpc(err) }),
        };
        if let Some(object) = line.as_object_mut() {
            object.insert("sessionId".to_owned(), json!(session.id()));
        }
        // An error may quote the server (`providerMessage`): its hidden characters as `\u` escapes.
        let line = crate::present::text::json_line(&line).unwrap_or_default();
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
    report(&session, &prompted.result);
    code
}

/// What stderr says about how the turn ended, when it did not simply end.
fn report(session: &Session, result: &Result<StopReason, crate::agent::TurnError>) {
    let paint = Paint::stderr();
    let resume = format!("(lathe exec --resume {} to go on)", session.id());
    match result {
        Ok(StopReason::EndTurn) => {}
        Ok(StopReason::Cancelled) => style::err_line(&paint.yellow(&format!("cancelled {resume}"))),
        Ok(StopReason::MaxTokens) => {
            style::err_line(&paint.yellow(&format!("stopped: the model reached its output limit {resume}")))
        }
        Ok(StopReason::MaxTurnRequests) => style::err_line(
            &paint
                .yellow(&format!("stopped: the turn used up its model requests ([agent] max_turn_requests) {resume}")),
        ),
        Ok(StopReason::Refusal) => style::err_line(&paint.yellow("stopped: the model refused")),
        Err(err) => {
            style::err_line(&format!("{} {}", paint.red("lathe: error:"), shown(&err.to_string(), Lines::Many)))
        }
    }
}

fn read_stdin() -> std::io::Result<String> {
    let mut prompt = String::new();
    std::io::stdin().lock().read_to_string(&mut prompt)?;
    Ok(prompt)
}

/// The first interrupt cancels the turn; a second exits at once (the
/// trampoline takes lathe's children down with it).
pub(super) async fn cancel_on_signals(session: Arc<Session>) {
    let Some(mut interrupts) = crate::platform::console::Interrupts::listen() else { return };
    for count in 0.. {
        interrupts.next().await;
        if count == 0 {
            style::err_line(&Paint::stderr().yellow("cancelling… (Ctrl-C again to quit now)"));
            // The session's own token too: a turn not yet started (the
            // signal came while the session was being set up) never starts.
            // exec ends with the turn, so nothing else of the session is lost.
            session.cancel_turns();
            session.close();
        } else {
            std::process::exit(i32::from(exit::CANCELLED));
        }
    }
}
