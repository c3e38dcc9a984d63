//! `lathe permissions`: the permission rules kept beyond a session, from a
//! terminal (see [`crate::rules`]). `list` shows this project's rules and
//! the user's (or every project's with `--all`), numbered; `rm` removes
//! rules by those numbers; `clear` removes all of this project's (or the
//! user's); `import` goes through the repository's own
//! `.lathe/permissions.toml`, which lathe never obeys by itself, showing each
//! rule and asking whether to keep it for this project.
//!
//! The project is the one of the current directory (its repository root).
//! What it prints passes through [`shown`]: a rule holds text a model
//! proposed (a command), and a repository's file is anybody's.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use crate::fs_guard::{self, Area};
use crate::permission::Rule;
use crate::present::text::{Lines, shown};
use crate::rules::{self, SessionRules};
use crate::tools::shell::CommandRule;

/// `lathe permissions` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum PermissionsCommand {
    /// The rules kept for this project and for every project, numbered
    /// (p1, p2, … for the project's, u1, … for yours).
    List {
        /// Every project's rules, not only this one's.
        #[arg(long)]
        all: bool,
    },
    /// Remove rules by their number in `list` (p1, u2, …).
    #[command(visible_alias = "remove")]
    Rm {
        /// The rules' numbers.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Remove every rule of this project (with --user: every rule of yours).
    Clear {
        /// Your rules for every project instead.
        #[arg(long)]
        user: bool,
    },
    /// Review the rules of this repository's .lathe/permissions.toml, one by
    /// one, and keep those you accept for this project.
    Import,
}

/// Why a `lathe permissions` command failed.
#[derive(Debug, thiserror::Error)]
pub enum PermissionsError {
    /// Writing the rules (or the terminal) failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A rule file could not be changed.
    #[error(transparent)]
    Rules(#[from] rules::RulesError),
    /// What was asked cannot be done here.
    #[error("{0}")]
    Usage(String),
}

/// Where the rules are: lathe's data and config directories, the current directory.
#[derive(Debug, Clone)]
pub struct Places {
    /// The current directory.
    pub cwd: PathBuf,
    /// The data directory (project rules).
    pub data_dir: Option<PathBuf>,
    /// The config directory (the user's rules).
    pub user_dir: Option<PathBuf>,
}

/// The terminal the user answers `import` on.
pub struct Terminal<'a> {
    /// Whether stdin is a terminal (`import` asks only there).
    pub interactive: bool,
    /// Its lines.
    pub input: &'a mut dyn BufRead,
}

/// Runs one `lathe permissions` command. Blocking.
pub fn run(
    command: PermissionsCommand,
    places: &Places,
    out: &mut dyn Write,
    terminal: Terminal<'_>,
) -> Result<(), PermissionsError> {
    let rules = SessionRules::for_cwd(&places.cwd, places.data_dir.as_deref(), places.user_dir.as_deref());
    match command {
        PermissionsCommand::List { all: false } => {
            out.write_all(rules::listing(None, &rules).as_bytes())?;
            Ok(())
        }
        PermissionsCommand::List { all: true } => list_all(places, &rules, out),
        PermissionsCommand::Rm { ids } => remove(&rules, &ids, out),
        PermissionsCommand::Clear { user } => {
            let (file, whose) = if user { (&rules.user, "yours") } else { (&rules.project, "this project's") };
            let file = file.as_ref().ok_or_else(|| PermissionsError::Usage(format!("{whose} rules are not kept")))?;
            let removed = file.remove(|_, _| true)?;
            writeln!(out, "removed {removed} rule{} ({whose})", if removed == 1 { "" } else { "s" })?;
            Ok(())
        }
        PermissionsCommand::Import => import(&rules, out, terminal),
    }
}

/// `list --all`: the user's rules, then every project's that has any.
fn list_all(places: &Places, rules: &SessionRules, out: &mut dyn Write) -> Result<(), PermissionsError> {
    let user_only = SessionRules { project: None, ..rules.clone() };
    let listed = rules::listing(None, &user_only);
    // The "not kept" line of the project part is about this directory only: left out here.
    for line in listed.lines().filter(|line| !line.starts_with("For this project")) {
        writeln!(out, "{line}")?;
    }
    let Some(data_dir) = &places.data_dir else { return Ok(()) };
    let mut folders: Vec<PathBuf> = match std::fs::read_dir(data_dir.join("projects")) {
        Ok(entries) => entries.filter_map(|entry| entry.ok().map(|entry| entry.path())).collect(),
        Err(_) => Vec::new(),
    };
    folders.sort();
    for folder in folders {
        let path = folder.join(rules::RULES_FILE);
        let loaded = rules::load(&path, None);
        if loaded.entries.is_empty() && loaded.warnings.is_empty() {
            continue;
        }
        writeln!(out, "`{}`:", shown(&path.display().to_string(), Lines::One))?;
        for entry in &loaded.entries {
            writeln!(out, "- {}", described(entry.allow, &entry.rule))?;
        }
        for warning in &loaded.warnings {
            writeln!(out, "  warning: {warning}")?;
        }
    }
    Ok(())
}

/// A rule as a line: allow or reject, what it covers.
fn described(allow: bool, rule: &Rule) -> String {
    let mut text = rule.describe();
    if let Rule::Command(CommandRule::Exact { cwd, .. }) = rule {
        text.push_str(&format!(" in {}", cwd.display()));
    }
    format!("{} {}", if allow { "allow " } else { "reject" }, shown(&text, Lines::One))
}

/// `rm p1 u2`: by the numbers `list` shows.
fn remove(rules: &SessionRules, ids: &[String], out: &mut dyn Write) -> Result<(), PermissionsError> {
    let mut wanted: Vec<(char, usize)> = Vec::new();
    for id in ids {
        let mut chars = id.trim().chars();
        let which = chars.next().map(|c| c.to_ascii_lowercase());
        let number = chars.as_str().parse::<usize>().ok().filter(|n| *n > 0);
        match (which, number) {
            (Some(which @ ('p' | 'u')), Some(number)) => wanted.push((which, number - 1)),
            _ => {
                return Err(PermissionsError::Usage(format!(
                    "{}: not a rule number (p1, p2, … for this project's rules, u1, … for yours; see `lathe \
                     permissions list`)",
                    shown(id, Lines::One)
                )));
            }
        }
    }
    for (which, file) in [('p', &rules.project), ('u', &rules.user)] {
        let numbers: Vec<usize> = wanted.iter().filter(|(w, _)| *w == which).map(|(_, n)| *n).collect();
        if numbers.is_empty() {
            continue;
        }
        let file = file.as_ref().ok_or_else(|| PermissionsError::Usage("those rules are not kept".to_owned()))?;
        let count = file.load().entries.len();
        if let Some(missing) = numbers.iter().find(|n| **n >= count) {
            return Err(PermissionsError::Usage(format!("there is no rule {which}{}", missing + 1)));
        }
        let removed = file.remove(|index, _| numbers.contains(&index))?;
        writeln!(out, "removed {removed} rule{}", if removed == 1 { "" } else { "s" })?;
    }
    Ok(())
}

/// `import`: each rule of the repository's file, shown and asked about.
fn import(rules: &SessionRules, out: &mut dyn Write, terminal: Terminal<'_>) -> Result<(), PermissionsError> {
    let project = rules.project.as_ref().ok_or_else(|| {
        PermissionsError::Usage("project rules are not kept: set --data-dir or LATHE_DATA_DIR".to_owned())
    })?;
    let path = rules.root.join(rules::REPOSITORY_RULES);
    let within = [rules.root.clone()];
    let text = match fs_guard::read_workspace_file(&path, Area::Within(&within), 1024 * 1024) {
        Ok(Some(read)) => read.text,
        Ok(None) => {
            writeln!(out, "{} does not exist: nothing to import", shown(&path.display().to_string(), Lines::One))?;
            return Ok(());
        }
        Err(refusal) => {
            return Err(PermissionsError::Usage(format!(
                "{} was not read: {refusal}",
                shown(&path.display().to_string(), Lines::One)
            )));
        }
    };
    if !terminal.interactive {
        return Err(PermissionsError::Usage(
            "import asks about each rule before keeping it: run it on a terminal".to_owned(),
        ));
    }
    let loaded = rules::parse(&text, &path, None, Some(&rules.root));
    for warning in &loaded.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    let mut kept = 0;
    for entry in &loaded.entries {
        if let Some(why) = outside(&entry.rule, &rules.root) {
            writeln!(out, "skipped (line {}): {} — {why}", entry.line, described(entry.allow, &entry.rule))?;
            continue;
        }
        write!(out, "{}\n  keep it for this project? [y/N] ", described(entry.allow, &entry.rule))?;
        out.flush()?;
        let mut answer = String::new();
        if terminal.input.read_line(&mut answer)? == 0 {
            break;
        }
        if matches!(answer.trim(), "y" | "Y" | "yes") {
            project.add(entry.allow, &entry.rule)?;
            kept += 1;
        }
    }
    writeln!(
        out,
        "kept {kept} rule{} for {}",
        if kept == 1 { "" } else { "s" },
        shown(&rules.root.display().to_string(), Lines::One)
    )?;
    Ok(())
}

/// Why a repository's rule may not be imported: a command rule for a
/// directory outside the repository.
fn outside(rule: &Rule, root: &Path) -> Option<&'static str> {
    match rule {
        Rule::Command(CommandRule::Exact { cwd, .. })
            if !crate::tools::paths::is_inside_roots(cwd, &[root.to_path_buf()]) =>
        {
            Some("its directory is outside the project")
        }
        _ => None,
    }
}
