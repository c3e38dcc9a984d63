//! The shell tool. (Being written.)

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Access, Description, ToolContext, ToolOutcome};

/// Arguments of `shell`.
#[derive(Debug, Clone, Deserialize)]
pub struct ShellArgs {
    /// The command line.
    pub command: String,
}

/// JSON schema of `shell`.
pub fn shell_schema() -> Value {
    json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
}

/// Describes a `shell` call.
pub fn describe_shell(args: &ShellArgs, cwd: &Path) -> Description {
    Description {
        title: format!("Run `{}`", args.command),
        locations: Vec::new(),
        access: Access::Execute { command: args.command.clone(), cwd: cwd.to_path_buf() },
        preview: Vec::new(),
    }
}

/// Runs `shell`.
pub async fn shell(_args: ShellArgs, _ctx: &ToolContext<'_>) -> ToolOutcome {
    ToolOutcome::failed("not implemented yet")
}
