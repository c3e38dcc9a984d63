//! What lathe asks of the editor: file reads and writes (`fs/*`), terminals
//! (`terminal/*`) and permission (`session/request_permission`), each used
//! only when the editor advertised it, with local disk and local processes
//! standing in otherwise. Implements the tools' [`Host`] and the agent's
//! [`Approver`] seams. File requests name the judged target's real location
//! and are checked again through [`crate::fs_guard`] just before they are sent.

use std::path::Path;

use agent_client_protocol_schema::v1::{
    ClientCapabilities, CreateTerminalRequest, CreateTerminalResponse, PermissionOption, PermissionOptionKind,
    ReadTextFileRequest, ReadTextFileResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SessionId, TerminalOutputResponse, ToolCallUpdate, WriteTextFileRequest,
};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::updates::{self, Lines};
use crate::agent::ToolCallChange;
use crate::fs_guard::{GuardError, Target};
use crate::permission::{Answer, ApprovalError, Approver, PermissionQuestion};
use crate::rpc::{CallError, Outbox};
use crate::tools::local::{Action, LocalHost, guard_error};
use crate::tools::{
    DisplayContent, Host, HostError, Launcher, TerminalCommand, TerminalExit, TerminalOutput, Terminals,
};

/// ACP's "resource not found" code.
const RESOURCE_NOT_FOUND: i32 = -32002;

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

    fn session_params(&self, terminal_id: &str) -> Value {
        json!({ "sessionId": self.session_id, "terminalId": terminal_id })
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
            let _: Value = self
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

fn exit_from(value: &Value) -> TerminalExit {
    TerminalExit {
        exit_code: value.get("exitCode").and_then(Value::as_u64).and_then(|c| u32::try_from(c).ok()),
        signal: value.get("signal").and_then(Value::as_str).map(str::to_owned),
    }
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
            let response: Value = self
                .outbox
                .call("terminal/wait_for_exit", &self.session_params(terminal_id))
                .await
                .map_err(|err| editor_error("wait for the terminal", None, err))?;
            // The exit status is inlined in the response; accept a nested one too.
            Ok(exit_from(response.get("exitStatus").unwrap_or(&response)))
        })
    }

    fn output<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<TerminalOutput, HostError>> {
        Box::pin(async move {
            let response: TerminalOutputResponse = self
                .outbox
                .call("terminal/output", &self.session_params(terminal_id))
                .await
                .map_err(|err| editor_error("read the terminal output", None, err))?;
            Ok(TerminalOutput {
                output: response.output,
                truncated: response.truncated,
                exit: response
                    .exit_status
                    .map(|status| TerminalExit { exit_code: status.exit_code, signal: status.signal }),
            })
        })
    }

    fn kill<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let _: Value = self
                .outbox
                .call("terminal/kill", &self.session_params(terminal_id))
                .await
                .map_err(|err| editor_error("kill the terminal command", None, err))?;
            Ok(())
        })
    }

    fn release<'a>(&'a self, terminal_id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let _: Value = self
                .outbox
                .call("terminal/release", &self.session_params(terminal_id))
                .await
                .map_err(|err| editor_error("release the terminal", None, err))?;
            Ok(())
        })
    }

    fn abandon(&self, terminal_id: &str) {
        // `terminal/release` also kills a running command. The request is
        // queued now, before the turn's answer; its reply is awaited on the side.
        let release = self.outbox.request("terminal/release", &self.session_params(terminal_id));
        let terminal_id = terminal_id.to_owned();
        tokio::spawn(async move {
            if let Err(err) = release.result::<Value>().await {
                tracing::warn!(%terminal_id, %err, "releasing an abandoned terminal failed");
            }
        });
    }
}

/// Asks the user through `session/request_permission`.
pub struct ClientApprover {
    /// The connection.
    pub outbox: Outbox,
    /// The session.
    pub session_id: SessionId,
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
                        Answer::AllowAlways => PermissionOptionKind::AllowAlways,
                        Answer::RejectOnce | Answer::Cancelled => PermissionOptionKind::RejectOnce,
                        Answer::RejectAlways => PermissionOptionKind::RejectAlways,
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
            let tool_call = ToolCallUpdate::new(question.call_id.clone(), updates::fields(change));
            let request = RequestPermissionRequest::new(self.session_id.clone(), tool_call, options);
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
}
