//! Search tools: list_directory, glob, grep. (Being written.)

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Access, Description, ToolContext, ToolOutcome};

/// Arguments of `list_directory`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListDirectoryArgs {
    /// Absolute or cwd-relative path.
    pub path: String,
}

/// Arguments of `glob`.
#[derive(Debug, Clone, Deserialize)]
pub struct GlobArgs {
    /// Absolute or cwd-relative path.
    pub path: String,
}

/// Arguments of `grep`.
#[derive(Debug, Clone, Deserialize)]
pub struct GrepArgs {
    /// Absolute or cwd-relative path.
    pub path: String,
}

/// JSON schema of `list_directory`.
pub fn list_directory_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}
/// JSON schema of `glob`.
pub fn glob_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}
/// JSON schema of `grep`.
pub fn grep_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
}

fn stub(path: &str, cwd: &Path) -> Description {
    Description { title: path.to_owned(), locations: Vec::new(), access: Access::Read(vec![super::paths::resolve(cwd, path)]), preview: Vec::new() }
}
/// Describes a `list_directory` call.
pub fn describe_list_directory(args: &ListDirectoryArgs, cwd: &Path) -> Description {
    stub(&args.path, cwd)
}
/// Describes a `glob` call.
pub fn describe_glob(args: &GlobArgs, cwd: &Path) -> Description {
    stub(&args.path, cwd)
}
/// Describes a `grep` call.
pub fn describe_grep(args: &GrepArgs, cwd: &Path) -> Description {
    stub(&args.path, cwd)
}
/// Runs `list_directory`.
pub async fn list_directory(_args: ListDirectoryArgs, _ctx: &ToolContext<'_>) -> ToolOutcome {
    ToolOutcome::failed("not implemented yet")
}
/// Runs `glob`.
pub async fn glob(_args: GlobArgs, _ctx: &ToolContext<'_>) -> ToolOutcome {
    ToolOutcome::failed("not implemented yet")
}
/// Runs `grep`.
pub async fn grep(_args: GrepArgs, _ctx: &ToolContext<'_>) -> ToolOutcome {
    ToolOutcome::failed("not implemented yet")
}
