//! What lathe asks of the editor: file reads and writes (`fs/*`), terminals
//! (`terminal/*`) and permission (`session/request_permission`), each used
//! only when the editor advertised it, with local disk and local processes
//! standing in otherwise. Implements the tools' [`Host`] and the agent's
//! [`Approver`] seams. File requests name the judged target's real location
//! and are checked again through [`crate::platform::authority`] just before they are sent.

use std::path::Path;

use agent_client_protocol_schema::v1::{
    ClientCapabilities, CreateElicitationRequest, CreateElicitationResponse, CreateTerminalRequest,
    CreateTerminalResponse, ElicitationAction, ElicitationContentValue, ElicitationFormMode, ElicitationSchema,
    ElicitationSessionScope, EnumOption, KillTerminalRequest, KillTerminalResponse, PermissionOption,
    PermissionOptionKind, ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest, ReleaseTerminalResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse, SessionId, StringPropertySchema,
    TerminalExitStatus, TerminalOutputRequest, TerminalOutputResponse, ToolCallId, ToolCallUpdate,
    WaitForTerminalExitRequest, WaitForTerminalExitResponse, WriteTextFileRequest, WriteTextFileResponse,
};
use futures_util::future::BoxFuture;

use super::RESOURCE_NOT_FOUND;
use super::updates::{self, Lines};
use crate::agent::ToolCallChange;
use crate::permission::{Answer, ApprovalError, Approver, AskError, PermissionQuestion, UserQuestion, UserReply};
use crate::platform::authority::{GuardError, Target};
use crate::rpc::{CallError, Outbox};
use crate::tools::local::{Action, LocalHost, guard_error};
use crate::tools::{
    DisplayContent, Host, HostError, Launcher, TerminalCommand, TerminalExit, TerminalOutput, Terminals,
};

/// Files and terminals for one session: through the editor where it offers
/// them, locally otherwise.
pub struct ClientHost {
    outbox: Outbox,
    session_id: SessionId,
    read_via_client: bool,
    write_via_client: bool,
    terminal: bool,
    local: LocalHost,
    launcher: Launcher,
}

impl ClientHost {
    /// The host for a session, given what the editor advertised; local
    /// processes are started by `launcher`.
    pub fn new(outbox: Outbox, session_id: SessionId, capabilities: &ClientCapabilities, launcher: Launcher) -> Self {
        Self {
            outbox,
            session_id,
            read_via_client: capabilities.fs.read_text_file,
            write_via_client: capabilities.fs.write_text_file,
            terminal: capabilities.terminal,
            local: LocalHost,
            launcher,
        }
    }
}

fn editor_error(action: &str, path: Option<&Path>, err: CallError) -> HostError {
    match (&err, path) {
        (CallError::Rpc(rpc), Some(path)) if rpc.code == RESOURCE_NOT_FOUND => {
            HostError::NotFound(path.display().to_string())
        }
        (_, Some(path)) => HostError::Other(format!("the editor could not {action} {}: {err}", path.display())),
        (_, None) => HostError::Other(format!("the editor could not {action}: {err}")),
    }
}

/// The editor reads and writes by name, so just before asking it, the judged
/// target is checked again through the path authority (no link swapped in,
/// same directory, no new hard link) and its real location is what the
/// editor is sent; for a write, the missing directories are created there,
/// beneath the judged directory, never through a link. Runs on a blocking
/// thread (it touches the disk).
async fn guarded(
    target: &Target,
    action: Action,
    check: fn(&Target) -> Result<(), GuardError>,
) -> Result<(), HostError> {
    let owned = target.clone();
    let named = target.named.clone();
    tokio::task::spawn_blocking(move || check(&owned))
        .await
        .map_err(|err| HostError::Other(format!("The file operation did not finish: {err}")))?
        .map_err(|err| guard_error(action, &named, err))
}

impl Host for ClientHost {
    fn read_text_file<'a>(&'a self, target: &'a Target) -> BoxFuture<'a, Result<String, HostError>> {
        if !self.read_via_client {
            return self.local.read_text_file(target);
        }
        Box::pin(async move {
            guarded(target, Action::Read, Target::check_readable).await?;
            let path = target.real.as_path();
            let request = ReadTextFileRequest::new(self.session_id.clone(), path);
            let response: ReadTextFileResponse = self
                .outbox
                .call("fs/read_text_file", &request)
                .await
                .map_err(|err| editor_error("read", Some(path), err))?;
            Ok(response.content)
        })
    }

    fn write_text_file<'a>(&'a self, target: &'a Target, content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        if !self.write_via_client {
            return self.local.write_text_file(target, content);
        }
        Box::pin(async move {
            // The editor creates the file, but not necessarily its directory:
            // the authority creates it, beneath the judged one.
            guarded(target, Action::Write, Target::prepare_in_place).await?;
            let path = target.real.as_path();
            let request = WriteTextFileRequest::new(self.session_id.clone(), path, content);
            let _: WriteTextFileResponse = self
                .outbox
                .call("fs/write_text_file", &request)
                .await
                .map_err(|err| editor_error("write", Some(path), err))?;
            Ok(())
        })
    }

    fn reads_via_client(&self) -> bool {
        self.read_via_client
    }

    fn writes_in_place(&self) -> bool {
        self.write_via_client
    }

    fn write_finishes_once_started(&self) -> bool {
        !self.write_via_client
    }

    fn terminals(&self) -> Option<&dyn Terminals> {
        if self.terminal { Some(self) } else { None }
    }

    fn launcher(&self) -> &Launcher {
        &self.launcher
    }
}

fn exit_from(status: TerminalExitStatus) -> TerminalExit {
    TerminalExit { exit_code: status.exit_code, signal: status.signal }
}

impl Terminals for ClientHost {
    fn create<'a>(&'a self, command: TerminalCommand<'a>) -> BoxFuture<'a, Result<String, HostError>> {
        Box::pin(async move {
            let request = CreateTerminalRequest::new(self.session_id.clone(), command.command)
                .args(command.args.to_vec())
                .cwd(command.cwd.to_path_buf())
                .output_byte_limit(command.output_byte_limit);
            let response: CreateTerminalResponse = self
                .outbox
                .call("terminal/create", &request)
                .await
                .map_err(|err| editor_error("start a terminal", None, err))?;
            Ok(response.terminal_id.0.to_string())
        })
    }

    fn wait_for_exit<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<TerminalExit, HostError>> {
        Box::pin(async move {
            let request = WaitForTerminalExitRequest::new(self.session_id.clone(), terminal_id.to_owned());
            let response: WaitForTerminalExitResponse = self
                .outbox
                .call("terminal/wait_for_exit", &request)
                .await
                .map_err(|err| editor_error("wait for the terminal", None, err))?;
            Ok(exit_from(response.exit_status))
        })
    }

    fn output<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<TerminalOutput, HostError>> {
        Box::pin(async move {
            let request = TerminalOutputRequest::new(self.session_id.clone(), terminal_id.to_owned());
            let response: TerminalOutputResponse = self
                .outbox
                .call("terminal/output", &request)
                .await
                .map_err(|err| editor_error("read the terminal output", None, err))?;
            Ok(TerminalOutput {
                output: response.output,
                truncated: response.truncated,
                exit: response.exit_status.map(exit_from),
            })
        })
    }

    fn kill<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let request = KillTerminalRequest::new(self.session_id.clone(), terminal_id.to_owned());
            let _: KillTerminalResponse = self
                .outbox
                .call("terminal/kill", &request)
                .await
                .map_err(|err| editor_error("kill the terminal command", None, err))?;
            Ok(())
        })
    }

    fn release<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let request = ReleaseTerminalRequest::new(self.session_id.clone(), terminal_id.to_owned());
            let _: ReleaseTerminalResponse = self
                .outbox
                .call("terminal/release", &request)
                .await
                .map_err(|err| editor_error("release the terminal", None, err))?;
            Ok(())
        })
    }

    fn abandon(&self, terminal_id: &str) {
        // `terminal/release` also kills a running command. The request is
        // queued now, before the turn's answer; its reply is awaited on the side.
        let request = ReleaseTerminalRequest::new(self.session_id.clone(), terminal_id.to_owned());
        let release = self.outbox.request("terminal/release", &request);
        let terminal_id = terminal_id.to_owned();
        tokio::spawn(async move {
            if let Err(err) = release.result::<ReleaseTerminalResponse>().await {
                tracing::warn!(%terminal_id, %err, "releasing an abandoned terminal failed");
            }
        });
    }
}

/// Asks the user through `session/request_permission`, and the model's
/// questions through an elicitation form where the editor offers one.
pub struct ClientApprover {
    /// The connection.
    pub outbox: Outbox,
    /// The session.
    pub session_id: SessionId,
    /// The editor offers elicitation forms (`elicitation.form`).
    pub form: bool,
    /// The editor shows subagent sessions (`subagents`): a sub-agent's
    /// call is asked about in its session, else in this one with
    /// `_meta.lathe.parentToolCallId` (see `updates::Offers::subagents`).
    pub subagents: bool,
}

/// The form field that holds the chosen answer.
const CHOICE_FIELD: &str = "choice";
/// The form field that holds an answer in the user's own words.
const TEXT_FIELD: &str = "answer";

impl ClientApprover {
    /// The model's question as an elicitation form: its choices as a
    /// single select, and a text field where a free answer is welcome.
    async fn ask_in_form(&self, question: &UserQuestion) -> Result<UserReply, AskError> {
        let mut schema = ElicitationSchema::new();
        let required_choice = !question.free_text;
        if !question.choices.is_empty() {
            let options: Vec<EnumOption> = question
                .choices
                .iter()
                .map(|c| EnumOption::new(c.id.clone(), updates::shown(&c.label, Lines::One).into_owned()))
                .collect();
            let field = StringPropertySchema::new().title("Answer".to_owned()).one_of(options);
            schema = schema.property(CHOICE_FIELD, field, required_choice);
        }
        if question.free_text {
            let title = if question.choices.is_empty() { "Answer" } else { "Or your own answer" };
            schema = schema.property(
                TEXT_FIELD,
                StringPropertySchema::new().title(title.to_owned()),
                question.choices.is_empty(),
            );
        }
        let scope = ElicitationSessionScope::new(self.session_id.clone())
            .tool_call_id(ToolCallId::new(question.call_id.clone()));
        let message = updates::shown(&question.question, Lines::Many).into_owned();
        let request = CreateElicitationRequest::new(ElicitationFormMode::new(scope, schema), message);
        let response: CreateElicitationResponse =
            self.outbox.call("elicitation/create", &request).await.map_err(|err| AskError::Failed(err.to_string()))?;
        match response.action {
            ElicitationAction::Accept(accepted) => {
                let content = accepted.content.unwrap_or_default();
                let text = |field: &str| match content.get(field) {
                    Some(ElicitationContentValue::String(text)) if !text.trim().is_empty() => Some(text.clone()),
                    _ => None,
                };
                if let Some(written) = text(TEXT_FIELD) {
                    return Ok(UserReply::Wrote(written));
                }
                match text(CHOICE_FIELD) {
                    Some(id) if question.choices.iter().any(|c| c.id == id) => Ok(UserReply::Chose(id)),
                    Some(id) => {
                        Err(AskError::Failed(format!("the editor answered with a choice that was not offered: {id}")))
                    }
                    None => Ok(UserReply::Declined),
                }
            }
            // The user dismissed the form: no answer (the turn goes on).
            ElicitationAction::Decline | ElicitationAction::Cancel => Ok(UserReply::Declined),
            _ => Err(AskError::Failed("the editor answered with an unknown action".to_owned())),
        }
    }

    /// The question as a permission request whose options are its choices
    /// (an editor without forms: no free answer).
    async fn ask_as_permission(&self, question: &UserQuestion) -> Result<UserReply, AskError> {
        if question.choices.is_empty() {
            return Err(AskError::Failed(
                "this editor can only show choices, and the question offered none: ask again with `choices`".to_owned(),
            ));
        }
        let options = question
            .choices
            .iter()
            .map(|choice| {
                let kind =
                    if choice.declines { PermissionOptionKind::RejectOnce } else { PermissionOptionKind::AllowOnce };
                PermissionOption::new(choice.id.clone(), updates::shown(&choice.label, Lines::One).into_owned(), kind)
            })
            .collect();
        let mut preview = vec![DisplayContent::Text(updates::shown(&question.question, Lines::Many).into_owned())];
        preview.extend(question.preview.iter().map(|content| match content {
            DisplayContent::Text(text) => DisplayContent::Text(updates::shown(text, Lines::Many).into_owned()),
            other => other.clone(),
        }));
        if question.approval {
            // The plan alone: the title asks the question.
            preview.remove(0);
        }
        let change =
            ToolCallChange { title: Some(question.title.clone()), content: Some(preview), ..ToolCallChange::default() };
        let tool_call = ToolCallUpdate::new(question.call_id.clone(), updates::fields(change));
        let request = RequestPermissionRequest::new(self.session_id.clone(), tool_call, options);
        let response: RequestPermissionResponse = self
            .outbox
            .call("session/request_permission", &request)
            .await
            .map_err(|err| AskError::Failed(err.to_string()))?;
        match response.outcome {
            RequestPermissionOutcome::Cancelled => Ok(UserReply::Cancelled),
            RequestPermissionOutcome::Selected(selected) => {
                let id = selected.option_id.0.to_string();
                match question.choices.iter().any(|c| c.id == id) {
                    true => Ok(UserReply::Chose(id)),
                    false => Err(AskError::Failed(format!("the editor chose an option that was not offered: {id}"))),
                }
            }
            _ => Err(AskError::Failed("the editor answered with an unknown outcome".to_owned())),
        }
    }
}

impl Approver for ClientApprover {
    fn ask<'a>(&'a self, question: &'a PermissionQuestion) -> BoxFuture<'a, Result<Answer, ApprovalError>> {
        Box::pin(async move {
            let options = question
                .choices
                .iter()
                .map(|choice| {
                    let kind = match choice.answer {
                        Answer::AllowOnce | Answer::AllowOutside => PermissionOptionKind::AllowOnce,
                        Answer::AllowAlways(_) => PermissionOptionKind::AllowAlways,
                        Answer::RejectOnce | Answer::Cancelled => PermissionOptionKind::RejectOnce,
                        Answer::RejectAlways(_) => PermissionOptionKind::RejectAlways,
                    };
                    PermissionOption::new(choice.id, updates::shown(&choice.label, Lines::One).into_owned(), kind)
                })
                .collect();
            // What the user is shown to decide on: every line, nothing hidden.
            let preview = question
                .preview
                .iter()
                .map(|content| match content {
                    DisplayContent::Text(text) => DisplayContent::Text(updates::shown(text, Lines::Many).into_owned()),
                    other => other.clone(),
                })
                .collect();
            let change = ToolCallChange {
                title: Some(question.title.clone()),
                kind: Some(question.kind),
                content: Some(preview),
                locations: Some(question.locations.clone()),
                raw_input: question.raw_input.clone(),
                ..ToolCallChange::default()
            };
            let mut tool_call = ToolCallUpdate::new(question.call_id.clone(), updates::fields(change));
            let mut session_id = self.session_id.clone();
            if let Some(parent) = &question.parent_call_id {
                if self.subagents {
                    session_id = updates::subagent_session_id(&self.session_id, parent);
                } else {
                    tool_call = tool_call.meta(updates::parent_call_meta(parent));
                }
            }
            let request = RequestPermissionRequest::new(session_id, tool_call, options);
            let response: RequestPermissionResponse = self
                .outbox
                .call("session/request_permission", &request)
                .await
                .map_err(|err| ApprovalError(err.to_string()))?;
            match response.outcome {
                RequestPermissionOutcome::Cancelled => Ok(Answer::Cancelled),
                RequestPermissionOutcome::Selected(selected) => question
                    .choices
                    .iter()
                    .find(|choice| *selected.option_id.0 == *choice.id)
                    .map(|choice| choice.answer)
                    .ok_or_else(|| {
                        ApprovalError(format!(
                            "the editor chose an option that was not offered: {}",
                            selected.option_id.0
                        ))
                    }),
                _ => Err(ApprovalError("the editor answered with an unknown outcome".to_owned())),
            }
        })
    }

    fn ask_user<'a>(&'a self, question: &'a UserQuestion) -> BoxFuture<'a, Result<UserReply, AskError>> {
        Box::pin(async move {
            // A plan's approval is a permission; the model's own question
            // goes as a form where the editor offers one.
            if self.form && !question.approval {
                self.ask_in_form(question).await
            } else {
                self.ask_as_permission(question).await
            }
        })
    }
}
