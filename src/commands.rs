//! Slash commands: the built-in ones (`/compact`, `/clear`, `/init`,
//! `/model`, `/mode`, `/undo`, `/redo`, `/checkpoints`, `/skills`), one per
//! skill (`/<skill-name>`, see [`crate::skills`]; a built-in or a command
//! file of the same name wins) and the user's own, written as Markdown files in the
//! project's `.lathe/commands/` or in lathe's config directory
//! (`~/.config/lathe/commands/`). A command file's body is the prompt it
//! sends, with `$ARGUMENTS` replaced by what the user typed after the name;
//! an optional front matter block gives its description and argument hint:
//!
//! ```text
//! ---
//! description: Review the staged changes
//! argument-hint: <focus>
//! ---
//! Review `git diff --staged`, focusing on $ARGUMENTS.
//! ```
//!
//! Command files are read through the one reader for untrusted workspace
//! files ([`authority::read_workspace_file`]): regular files only (a FIFO or a
//! link to `/dev/zero` is skipped at once, never read), at most
//! [`MAX_COMMAND_BYTES`], and a project command must lead to a file inside
//! the cwd. The user's own commands directory is trusted but type- and
//! size-checked. A file that is skipped is named in a warning in the log.
//!
//! This module finds and parses commands; it knows nothing of ACP or of
//! what the built-in commands do (the `acp` module runs them).

use std::path::Path;

use crate::platform::authority::{self, Area};
use crate::skills::Skill;

/// Largest command file read; a prompt template has no use for more.
pub const MAX_COMMAND_BYTES: u64 = 64 * 1024;

/// What a command does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandKind {
    /// Summarise the conversation now.
    Compact,
    /// Start a fresh context in the same session.
    Clear,
    /// Write or update the project's AGENTS.md.
    Init,
    /// Show or switch the model.
    Model,
    /// Show or switch the mode.
    Mode,
    /// Take back the last turn: its file changes and its messages.
    Undo,
    /// Apply the last undone turn again.
    Redo,
    /// List the turns `/undo` can take back.
    Checkpoints,
    /// List the permission rules: the session's, the project's, the user's.
    Permissions,
    /// List the session's skills.
    Skills,
    /// Run the session's skill of this command's name: a turn with its
    /// instructions loaded.
    Skill,
    /// A user command: send this prompt template.
    Custom {
        /// The prompt, with `$ARGUMENTS` where the arguments go.
        template: String,
    },
}

/// A command the editor can offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlashCommand {
    /// The name, without the slash.
    pub name: String,
    /// What it does, for the editor's menu.
    pub description: String,
    /// What to type after it, if anything.
    pub hint: Option<String>,
    /// What it does.
    pub kind: CommandKind,
}

fn builtin(name: &str, description: &str, hint: Option<&str>, kind: CommandKind) -> SlashCommand {
    SlashCommand { name: name.to_owned(), description: description.to_owned(), hint: hint.map(str::to_owned), kind }
}

/// Every command for a session in `cwd`: the built-ins, then the project's,
/// then the user's (a project command hides a user command of the same name;
/// neither can hide a built-in).
pub fn available(cwd: &Path, user_dir: Option<&Path>) -> Vec<SlashCommand> {
    let mut commands = vec![
        builtin("compact", "Summarise the conversation so far to free context", None, CommandKind::Compact),
        builtin("clear", "Start a fresh conversation in this session", None, CommandKind::Clear),
        builtin(
            "init",
            "Write or update AGENTS.md with what an agent should know about this project",
            None,
            CommandKind::Init,
        ),
        builtin("model", "Show the models, or switch to one", Some("<model>"), CommandKind::Model),
        builtin("mode", "Show the modes, or switch to one", Some("<mode>"), CommandKind::Mode),
        builtin(
            "undo",
            "Undo the last turn: restore the files it changed and take it out of the conversation",
            Some("[--force]"),
            CommandKind::Undo,
        ),
        builtin("redo", "Apply the last undone turn again", None, CommandKind::Redo),
        builtin("checkpoints", "List the turns /undo can take back, with their files", None, CommandKind::Checkpoints),
        builtin(
            "permissions",
            "List the permission rules: this session's, this project's and yours",
            None,
            CommandKind::Permissions,
        ),
        builtin("skills", "List the skills (each is a command too: /<skill> [request])", None, CommandKind::Skills),
    ];
    let project = cwd.join(".lathe").join("commands");
    let user = user_dir.map(|dir| dir.join("commands"));
    let in_cwd = [cwd.to_path_buf()];
    let dirs = std::iter::once((project.as_path(), Area::Within(&in_cwd)))
        .chain(user.as_deref().map(|dir| (dir, Area::Trusted)));
    for (dir, area) in dirs {
        for command in custom_commands(dir, area) {
            if !commands.iter().any(|c| c.name == command.name) {
                commands.push(command);
            }
        }
    }
    commands
}

/// Adds a command for each of `skills` to `commands`, unless a command of
/// its name is there already (a built-in or a command file wins); the
/// skills left out.
pub fn add_skills<'a>(commands: &mut Vec<SlashCommand>, skills: &'a [Skill]) -> Vec<&'a Skill> {
    let mut hidden = Vec::new();
    for skill in skills {
        if commands.iter().any(|command| command.name == skill.name) {
            hidden.push(skill);
            continue;
        }
        commands.push(SlashCommand {
            name: skill.name.clone(),
            description: skill.description.clone(),
            hint: Some("[request]".to_owned()),
            kind: CommandKind::Skill,
        });
    }
    hidden
}

fn custom_commands(dir: &Path, area: Area<'_>) -> Vec<SlashCommand> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<SlashCommand> = entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("md") {
                return None;
            }
            let name = path.file_stem()?.to_str()?.to_owned();
            if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '-' || c == '_' || c == ':') {
                return None;
            }
            match authority::read_workspace_file(&path, area, MAX_COMMAND_BYTES) {
                Ok(Some(read)) if read.omitted == 0 => Some(parse_command_file(&name, &read.text)),
                Ok(Some(_)) => {
                    tracing::warn!(path = %path.display(), limit = MAX_COMMAND_BYTES, "skipping a command file over the size limit");
                    None
                }
                Ok(None) => None,
                Err(refusal) => {
                    tracing::warn!(path = %path.display(), reason = %refusal, "skipping a command file");
                    None
                }
            }
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// Parses a command file: optional front matter, then the prompt template.
pub fn parse_command_file(name: &str, text: &str) -> SlashCommand {
    let mut description = None;
    let mut hint = None;
    let mut body = text;
    if let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"))
        && let Some(end) = rest.find("\n---")
    {
        for line in rest[..end].lines() {
            if let Some((key, value)) = line.split_once(':') {
                let value = value.trim().trim_matches('"').to_owned();
                match key.trim() {
                    "description" => description = Some(value),
                    "argument-hint" | "argument_hint" => hint = Some(value),
                    _ => {}
                }
            }
        }
        body = rest[end + 4..].trim_start_matches(['\r', '\n']);
    }
    let template = body.trim().to_owned();
    let description = description.unwrap_or_else(|| {
        let first = template.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        let mut summary: String = first.chars().take(80).collect();
        if first.chars().count() > 80 {
            summary.push('…');
        }
        if summary.is_empty() { format!("Run the {name} command") } else { summary }
    });
    SlashCommand { name: name.to_owned(), description, hint, kind: CommandKind::Custom { template } }
}

/// Splits `/name arguments` into its name and arguments; `None` when the
/// text is not a slash command.
pub fn parse_invocation(text: &str) -> Option<(&str, &str)> {
    let rest = text.trim_start().strip_prefix('/')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (name, args) = rest.split_at(end);
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '-' || c == '_' || c == ':') {
        return None;
    }
    Some((name, args.trim()))
}

/// The prompt a custom command sends: `$ARGUMENTS` replaced, or the
/// arguments appended when the template does not mention them.
pub fn expand(template: &str, arguments: &str) -> String {
    if template.contains("$ARGUMENTS") {
        template.replace("$ARGUMENTS", arguments)
    } else if arguments.is_empty() {
        template.to_owned()
    } else {
        format!("{template}\n\n{arguments}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invocations() {
        assert_eq!(parse_invocation("/compact"), Some(("compact", "")));
        assert_eq!(parse_invocation("  /model  gpt-x  "), Some(("model", "gpt-x")));
        assert_eq!(
            parse_invocation("/review focus on errors\nand tests"),
            Some(("review", "focus on errors\nand tests"))
        );
        assert_eq!(parse_invocation("not a command"), None);
        assert_eq!(parse_invocation("/"), None);
        assert_eq!(parse_invocation("/usr/bin/env is a path"), None);
    }

    #[test]
    fn command_files_and_arguments() {
        let command = parse_command_file(
            "review",
            "---\ndescription: Review the staged changes\nargument-hint: <focus>\n---\nReview the diff, focusing on $ARGUMENTS.\n",
        );
        assert_eq!(command.description, "Review the staged changes");
        assert_eq!(command.hint.as_deref(), Some("<focus>"));
        let CommandKind::Custom { template } = &command.kind else { panic!() };
        assert_eq!(expand(template, "error handling"), "Review the diff, focusing on error handling.");
        let plain = parse_command_file("fix", "Fix the failing test.\nThen run it.");
        assert_eq!(plain.description, "Fix the failing test.");
        let CommandKind::Custom { template } = &plain.kind else { panic!() };
        assert_eq!(expand(template, "in parser.rs"), "Fix the failing test.\nThen run it.\n\nin parser.rs");
    }

    /// A command file is read line by line, never as a tree: a file at the
    /// size cap of nested front matter, block quotes, lists or brackets
    /// (issue 29) parses at once into a description and a template.
    #[test]
    fn deeply_nested_command_files_parse_without_recursion() {
        let cap = usize::try_from(MAX_COMMAND_BYTES).unwrap();
        let nested = [
            format!("---\ndescription: {}\n---\nbody", "[{".repeat(cap / 4)),
            format!("---\n{}\n---\nbody", "  - a:\n".repeat(cap / 16)),
            ">".repeat(cap - 8),
            "- ".repeat(cap / 2 - 4),
            format!("{}x{}", "[".repeat(cap / 2 - 4), "]".repeat(cap / 2 - 4)),
        ];
        for text in nested {
            assert!(text.len() <= cap);
            let command = parse_command_file("deep", &text);
            assert!(command.description.chars().count() <= 81 || command.description.starts_with("[{"));
            let CommandKind::Custom { template } = &command.kind else { panic!() };
            assert!(!template.is_empty());
        }
    }

    #[test]
    fn project_commands_hide_user_commands_but_not_builtins() {
        let project = tempfile::tempdir().unwrap();
        let user = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join(".lathe/commands")).unwrap();
        std::fs::create_dir_all(user.path().join("commands")).unwrap();
        std::fs::write(project.path().join(".lathe/commands/review.md"), "project review").unwrap();
        std::fs::write(project.path().join(".lathe/commands/clear.md"), "not allowed to hide /clear").unwrap();
        std::fs::write(user.path().join("commands/review.md"), "user review").unwrap();
        std::fs::write(user.path().join("commands/ship.md"), "ship it").unwrap();
        std::fs::write(user.path().join("commands/notes.txt"), "not a command").unwrap();
        let commands = available(project.path(), Some(user.path()));
        let names: Vec<&str> = commands.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "compact",
                "clear",
                "init",
                "model",
                "mode",
                "undo",
                "redo",
                "checkpoints",
                "permissions",
                "skills",
                "review",
                "ship"
            ]
        );
        assert_eq!(commands[10].kind, CommandKind::Custom { template: "project review".into() });
        assert_eq!(commands[1].kind, CommandKind::Clear);
    }

    /// A skill is a command, unless a built-in or a command file has its name.
    #[test]
    fn skills_are_commands_unless_a_command_has_the_name() {
        let skill = |name: &str| Skill {
            name: name.to_owned(),
            description: format!("{name}s"),
            path: format!("/p/.lathe/skills/{name}/SKILL.md").into(),
            inside: None,
        };
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join(".lathe/commands")).unwrap();
        std::fs::write(project.path().join(".lathe/commands/review.md"), "review").unwrap();
        let mut commands = available(project.path(), None);
        let skills = [skill("compact"), skill("pdf"), skill("review"), skill("skills")];
        let hidden: Vec<&str> = add_skills(&mut commands, &skills).iter().map(|s| s.name.as_str()).collect();
        assert_eq!(hidden, ["compact", "review", "skills"]);
        let pdf = commands.iter().find(|c| c.name == "pdf").unwrap();
        assert_eq!(
            (pdf.kind.clone(), pdf.description.as_str(), pdf.hint.as_deref()),
            (CommandKind::Skill, "pdfs", Some("[request]"))
        );
        assert_eq!(commands.iter().filter(|c| c.name == "compact").count(), 1);
    }
}
