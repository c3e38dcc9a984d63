//! File tools: read_file, write_file, edit_file. (Being written.)

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Access, Description, ToolContext, ToolOutcome};

/// Arguments of `read_file`.
#[derive(Debug, Clone, Deserialize)]
pub struct ReadFileArgs {
    /// Absolute or cwd-relative path.
    pub path: String,
}

/// Arguments of `write_file`.
#[derive(Debug, Clone, Deserialize)]
pub struct WriteFileArgs {
    /// Absolute or cwd-relative path.
    pub path: String,
}

/// Arguments of `edit_file`.
#[derive(Debug, Clone, Deserialize)]
pub struct EditFileArgs {
    /// Absolute or cwd-relative path.
    pub path: String,
}

/// JSON schema of `read_file`.
pub fn read_file_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}
/// JSON schema of `write_file`.
pub fn write_file_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}
/// JSON schema of `edit_file`.
pub fn edit_file_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}

fn stub(path: &str, cwd: &Path) -> Description {
    Description { title: path.to_owned(), locations: Vec::new(), access: Access::Read(vec![super::paths::resolve(cwd, path)]), preview: Vec::new() }
}
/// Describes a `read_file` call.
pub fn describe_read_file(args: &ReadFileArgs, cwd: &Path) -> Description {
    stub(&args.path, cwd)
}
/// Describes a `write_file` call.
pub fn describe_write_file(args: &WriteFileArgs, cwd: &Path) -> Description {
    stub(&args.path, cwd)
}
/// Describes an `edit_file` call.
pub fn describe_edit_file(args: &EditFileArgs, cwd: &Path) -> Description {
    stub(&args.path, cwd)
}
/// Runs `read_file`.
pub async fn read_file(_args: ReadFileArgs, _ctx: &ToolContext<'_>) -> ToolOutcome {
    ToolOutcome::failed("not implemented yet")
}
/// Runs `write_file`.
pub async fn write_file(_args: WriteFileArgs, _ctx: &ToolContext<'_>) -> ToolOutcome {
    ToolOutcome::failed("not implemented yet")
}
/// Runs `edit_file`.
pub async fn edit_file(_args: EditFileArgs, _ctx: &ToolContext<'_>) -> ToolOutcome {
    ToolOutcome::failed("not implemented yet")
}
