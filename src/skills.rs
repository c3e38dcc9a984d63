//! Skills: the open Agent Skills format (agentskills.io). A skill is a
//! folder holding a `SKILL.md`, whose front matter names and describes it,
//! and whose body (and the folder's other files) tell an agent how to do
//! one kind of task:
//!
//! ```text
//! .lathe/skills/pdf-forms/SKILL.md
//! ---
//! name: pdf-forms                  (required: 1-64 of a-z, 0-9 and -, no leading,
//!                                   trailing or double -; the folder's name)
//! description: Fills PDF forms. Use when the user asks to fill a form.
//!                                  (required: what it does and when; at most 1,024)
//! license: MIT                     (optional, as are compatibility, metadata and
//!                                   allowed-tools; lathe reads none of them:
//!                                   allowed-tools never grants a tool)
//! ---
//! Instructions...
//! ```
//!
//! Skills are found in the project's `.lathe/skills/<name>/` and
//! `.agents/skills/<name>/` (the folder other agents read too), then in the
//! user's `skills/` of lathe's config folder (`~/.config/lathe/skills/` on
//! Linux; see [`crate::platform::folders`]) and in `~/.agents/skills/` (the
//! user's folder other agents read too); the first of a name wins, so a
//! project's skill hides the user's. At most [`MAX_SKILLS`] are read.
//!
//! The system prompt lists each skill on one line, sorted by name: its
//! name, its description (on one line, at most [`MAX_DESCRIPTION_CHARS`])
//! and where its `SKILL.md` is (relative to the project for a project's
//! skill, in full for the user's), so the model reads the body with the
//! ordinary read tool when a task matches (a session with no skills has
//! nothing added). The user's own skill folders read without asking (see
//! [`crate::permission::Policy::set_skill_folders`]). The user runs a skill
//! as a slash command, `/<name> arguments`: a turn whose prompt is the
//! skill's body (see [`load`]); `/skills` lists them.
//!
//! A project's skill files are untrusted workspace input, read through the
//! one reader for workspace files ([`authority::read_workspace_file`]):
//! regular files only (a FIFO is never opened for a blocking read), leading
//! inside the project (a link out of it is skipped), at most
//! [`MAX_SKILL_BYTES`]. A skill whose file is skipped, or whose front matter
//! is missing or broken, is named in a warning in the log and left out.
//! The user's own folder is trusted but type- and size-checked too.

use std::path::{Path, PathBuf};

use crate::front_matter;
use crate::platform::authority::{self, Area};

/// Largest `SKILL.md` read; a skill's instructions have no use for more
/// (the spec advises under 5,000 tokens).
pub const MAX_SKILL_BYTES: u64 = 64 * 1024;

/// Most skills read for a session: each costs a line of every request.
pub const MAX_SKILLS: usize = 64;

/// Longest description listed, in characters; a longer one is cut (the
/// spec allows 1,024; a hostile file could say far more).
pub const MAX_DESCRIPTION_CHARS: usize = 300;

/// Longest name (the spec's limit).
const MAX_NAME_CHARS: usize = 64;

/// The file a skill folder holds.
pub const SKILL_FILE: &str = "SKILL.md";

const LISTING_INTRO: &str = include_str!("../prompts/skills.md");
const INVOKED: &str = include_str!("../prompts/skill.md");

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name (the slash command's).
    pub name: String,
    /// What it does and when to use it, on one line, capped.
    pub description: String,
    /// Its `SKILL.md`.
    pub path: PathBuf,
    /// The project root its file must stay inside; `None` for the user's own.
    pub inside: Option<PathBuf>,
}

impl Skill {
    /// The folder the skill's files are in.
    pub fn folder(&self) -> &Path {
        self.path.parent().unwrap_or(&self.path)
    }

    /// Its `SKILL.md` as the prompt names it: relative to the project for a
    /// project's skill (fewer tokens; the read tool reads from there), with
    /// `/` on every system ([`crate::platform::paths::relative_text`]); in
    /// full, in the system's spelling, for the user's.
    pub fn shown_path(&self) -> String {
        match self.inside.as_deref().and_then(|root| self.path.strip_prefix(root).ok()) {
            Some(relative) => crate::platform::paths::relative_text(relative),
            None => self.path.display().to_string(),
        }
    }
}

/// A session's skills, sorted by name (so the prompt's list is byte-stable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skills {
    skills: Vec<Skill>,
}

impl Skills {
    /// These skills, sorted by name; of two of a name the first is kept.
    pub fn new(found: Vec<Skill>) -> Skills {
        let mut skills: Vec<Skill> = Vec::new();
        for skill in found {
            if !skills.iter().any(|known| known.name == skill.name) {
                skills.push(skill);
            }
        }
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        Skills { skills }
    }

    /// Every skill, by name.
    pub fn all(&self) -> &[Skill] {
        &self.skills
    }

    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|skill| skill.name == name)
    }

    /// What the system prompt says of the skills: the intro from
    /// `prompts/skills.md`, then one line per skill; `None` when there are
    /// none (the prompt is then exactly what it is without skills).
    pub fn listing(&self) -> Option<String> {
        if self.skills.is_empty() {
            return None;
        }
        let lines: Vec<String> = self
            .skills
            .iter()
            .map(|skill| format!("- {}: {} ({})", skill.name, skill.description, skill.shown_path()))
            .collect();
        Some(format!("{}\n{}", LISTING_INTRO.trim_end(), lines.join("\n")))
    }

    /// The folders of the user's own skills, as they really are (links
    /// followed): reading in them does not ask.
    pub fn user_folders(&self) -> Vec<PathBuf> {
        self.skills
            .iter()
            .filter(|skill| skill.inside.is_none())
            .map(|skill| authority::Target::of(skill.folder()).real)
            .collect()
    }

    /// `/skills`: what the user can run, or where to put skills.
    pub fn summary(&self) -> String {
        if self.skills.is_empty() {
            return "No skills. A skill is a folder with a SKILL.md (front matter `name` and `description`, then \
                    instructions) in the project's .lathe/skills/ or .agents/skills/, in skills/ of lathe's \
                    config folder, or in ~/.agents/skills/."
                .to_owned();
        }
        let lines: Vec<String> = self
            .skills
            .iter()
            .map(|skill| format!("- `/{}`: {} ({})", skill.name, skill.description, skill.shown_path()))
            .collect();
        format!("Skills (run one with `/<name> [request]`):\n{}", lines.join("\n"))
    }
}

/// The skills of a session in `cwd`: the project's (`.lathe/skills/`, then
/// `.agents/skills/`), then the user's (`<user_dir>/skills/`, then
/// `<home>/.agents/skills/`); the first of a name wins, at most
/// [`MAX_SKILLS`]. Blocking: it reads files.
pub fn discover(cwd: &Path, user_dir: Option<&Path>, home: Option<&Path>) -> Vec<Skill> {
    let mut dirs: Vec<(PathBuf, Option<PathBuf>)> = vec![
        (cwd.join(".lathe").join("skills"), Some(cwd.to_path_buf())),
        (cwd.join(".agents").join("skills"), Some(cwd.to_path_buf())),
    ];
    if let Some(user_dir) = user_dir {
        dirs.push((user_dir.join("skills"), None));
    }
    if let Some(home) = home {
        let shared = home.join(".agents").join("skills");
        // A project in the home folder itself has read it already, as its own.
        if !dirs.iter().any(|(dir, _)| *dir == shared) {
            dirs.push((shared, None));
        }
    }
    let mut found: Vec<Skill> = Vec::new();
    for (dir, inside) in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut folders: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        folders.sort();
        for folder in folders {
            if !folder.is_dir() {
                continue;
            }
            if found.len() >= MAX_SKILLS {
                tracing::warn!(path = %folder.display(), limit = MAX_SKILLS, "skipping a skill: too many skills");
                return found;
            }
            let Some(skill) = read_skill(&folder, inside.as_deref()) else { continue };
            match found.iter().find(|known| known.name == skill.name) {
                Some(known) => tracing::debug!(
                    path = %skill.path.display(), over = %known.path.display(), "a skill of the same name comes first"
                ),
                None => found.push(skill),
            }
        }
    }
    found
}

/// The skill in `folder`, or `None` (with a warning, unless the folder
/// simply holds no `SKILL.md`).
fn read_skill(folder: &Path, inside: Option<&Path>) -> Option<Skill> {
    let path = folder.join(SKILL_FILE);
    let folder_name = folder.file_name().and_then(|name| name.to_str()).unwrap_or_default();
    // The path is a line of the system prompt: nothing that can break it.
    if folder_name.is_empty() || folder_name.chars().any(char::is_control) {
        tracing::warn!(path = %folder.display(), "skipping a skill: its folder's name is not one line of text");
        return None;
    }
    let text = read(&path, inside)?;
    match parse(&text) {
        Ok((name, description)) => {
            if name != folder_name {
                tracing::warn!(path = %path.display(), %name, "a skill's name is not its folder's; it is known by its name");
            }
            Some(Skill { name, description, path, inside: inside.map(Path::to_path_buf) })
        }
        Err(why) => {
            tracing::warn!(path = %path.display(), reason = %why, "skipping a skill");
            None
        }
    }
}

/// A skill file's text, through the reader for workspace files; `None`
/// (with a warning, unless it is missing) when it is not read.
fn read(path: &Path, inside: Option<&Path>) -> Option<String> {
    let roots: Vec<PathBuf> = inside.map(Path::to_path_buf).into_iter().collect();
    let area = if inside.is_some() { Area::Within(&roots) } else { Area::Trusted };
    match authority::read_workspace_file(path, area, MAX_SKILL_BYTES) {
        Ok(Some(read)) if read.omitted == 0 => Some(read.text),
        Ok(Some(_)) => {
            tracing::warn!(path = %path.display(), limit = MAX_SKILL_BYTES, "skipping a skill file over the size limit");
            None
        }
        Ok(None) => None,
        Err(refusal) => {
            tracing::warn!(path = %path.display(), reason = %refusal, "skipping a skill file");
            None
        }
    }
}

/// A `SKILL.md`'s name and description (the description on one line,
/// capped), or why the file is not a skill.
pub fn parse(text: &str) -> Result<(String, String), String> {
    let (front, _) = front_matter::split(text)?;
    let name = front.get("name").ok_or("no name")?.to_owned();
    if !valid_name(&name) {
        return Err(format!(
            "the name {:?} is not 1-64 of a-z, 0-9 and - (no leading, trailing or double -)",
            name.chars().take(MAX_NAME_CHARS + 1).collect::<String>()
        ));
    }
    let description = one_line(front.get("description").unwrap_or_default());
    if description.is_empty() {
        return Err("no description".to_owned());
    }
    Ok((name, description))
}

/// The spec's rule for a name: 1-64 of `a-z`, `0-9` and `-`, not starting
/// or ending with `-`, no `--`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// Text on one line (every run of whitespace or control characters one
/// space), at most [`MAX_DESCRIPTION_CHARS`] characters.
fn one_line(text: &str) -> String {
    let words: Vec<&str> =
        text.split(|c: char| c.is_whitespace() || c.is_control()).filter(|w| !w.is_empty()).collect();
    let line = words.join(" ");
    if line.chars().count() <= MAX_DESCRIPTION_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(MAX_DESCRIPTION_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The prompt `/<skill> arguments` sends: the skill's body (read again,
/// through the same reader) in the words of `prompts/skill.md`, with
/// `$ARGUMENTS` replaced, or the arguments after it. Blocking: it reads
/// the file. `Err` says why the skill cannot run now.
pub fn load(skill: &Skill, arguments: &str) -> Result<String, String> {
    let text = read(&skill.path, skill.inside.as_deref())
        .ok_or_else(|| format!("The skill `{}` cannot be read now ({}).", skill.name, skill.path.display()))?;
    let (_, body) =
        front_matter::split(&text).map_err(|why| format!("The skill `{}` is no longer valid: {why}.", skill.name))?;
    let path = skill.path.display().to_string();
    let prompt = fill(INVOKED.trim_end(), &[("name", &skill.name), ("path", &path), ("body", body.trim())]);
    Ok(crate::commands::expand(&prompt, arguments))
}

/// `template` with each `{key}` replaced by its value, in one pass (a value
/// that holds `{key}` is left as it is).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let found = after
            .find('}')
            .and_then(|end| values.iter().find(|(key, _)| *key == &after[..end]).map(|(_, value)| (end, value)));
        match found {
            Some((end, value)) => {
                out.push_str(value);
                rest = &after[end + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn names_follow_the_spec() {
        for good in ["pdf", "pdf-forms", "a1", &"a".repeat(64)] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "PDF", "-pdf", "pdf-", "pdf--forms", "pdf forms", "pdf_forms", "é", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn front_matter_and_descriptions() {
        let text = "---\nname: pdf\ndescription: >\n  Fills forms.\n  Use\twhen\u{7}asked.\nlicense: MIT\nmetadata:\n  name: other\n---\nBody";
        assert_eq!(parse(text).unwrap(), ("pdf".to_owned(), "Fills forms. Use when asked.".to_owned()));
        let long = format!("---\nname: x\ndescription: {}\n---\n", "word ".repeat(1000));
        let (_, description) = parse(&long).unwrap();
        assert_eq!(description.chars().count(), MAX_DESCRIPTION_CHARS);
        assert!(description.ends_with('…'));
        for broken in [
            "no front matter",
            "---\nname: x\n",
            "---\ndescription: no name\n---\n",
            "---\nname: x\n---\nno description",
            "---\nname: x\ndescription:   \n---\n",
            "---\nname: Bad_Name\ndescription: d\n---\n",
            "---\nname: x\nnot a key value line\n---\n",
        ] {
            assert!(parse(broken).is_err(), "{broken:?}");
        }
    }

    #[test]
    fn fill_is_one_pass() {
        let filled = fill("{name} at {path}: {body} {other}", &[("name", "{path}"), ("path", "p"), ("body", "{name}")]);
        assert_eq!(filled, "{path} at p: {name} {other}");
    }

    #[test]
    fn a_skill_runs_with_its_body_and_the_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("pdf");
        std::fs::create_dir_all(&folder).unwrap();
        let path = folder.join(SKILL_FILE);
        std::fs::write(&path, "---\nname: pdf\ndescription: d\n---\n\nRun scripts/fill.py on $ARGUMENTS.\n").unwrap();
        let skill = Skill { name: "pdf".into(), description: "d".into(), path: path.clone(), inside: None };
        let prompt = load(&skill, "form.pdf").unwrap();
        assert!(prompt.contains("Run scripts/fill.py on form.pdf."), "{prompt}");
        assert!(prompt.contains(&path.display().to_string()), "{prompt}");
        assert!(!prompt.contains("description: d"), "the front matter is left out: {prompt}");
        std::fs::write(&path, "---\nname: pdf\ndescription: d\n---\nFill it.").unwrap();
        assert!(load(&skill, "form.pdf").unwrap().ends_with("Fill it.\n</skill>\n\nform.pdf"));
        std::fs::remove_file(&path).unwrap();
        assert!(load(&skill, "").is_err());
    }

    use crate::agents::file_tests::warnings_of;

    fn skill_file(dir: &Path, folder: &str, text: &str) {
        std::fs::create_dir_all(dir.join(folder)).unwrap();
        std::fs::write(dir.join(folder).join(SKILL_FILE), text).unwrap();
    }

    /// Project skills linking outside the project (the file, or the whole
    /// folder), a 50 MB one, a FIFO, and ones with broken front matter are
    /// skipped with a warning, without blocking; the good ones are read,
    /// the project's first, and listed sorted.
    #[test]
    fn untrusted_skills_are_skipped_with_a_warning() {
        let home = tempfile::tempdir().unwrap();
        let project = home.path().join("project");
        let lathe = project.join(".lathe/skills");
        let agents = project.join(".agents/skills");
        let user = home.path().join("config");
        std::fs::create_dir_all(&lathe).unwrap();
        std::fs::create_dir_all(&agents).unwrap();
        skill_file(&lathe, "review", "---\nname: review\ndescription: Reviews a diff\n---\nReview.");
        skill_file(&agents, "deploy", "---\nname: deploy\ndescription: Deploys\n---\nDeploy.");
        skill_file(&agents, "review", "---\nname: review\ndescription: hidden by .lathe's\n---\nR.");
        skill_file(&user.join("skills"), "review", "---\nname: review\ndescription: the user's\n---\nU.");
        skill_file(&user.join("skills"), "notes", "---\nname: notes\ndescription: Takes notes\n---\nN.");
        skill_file(home.path(), "secret", "---\nname: leak\ndescription: l\n---\nL.");
        skill_file(home.path(), "elsewhere", "---\nname: elsewhere\ndescription: e\n---\nE.");
        std::fs::create_dir_all(lathe.join("leak")).unwrap();
        if !crate::platform::testing::symlink(home.path().join("secret/SKILL.md"), lathe.join("leak/SKILL.md")) {
            return;
        }
        if !crate::platform::testing::symlink(home.path().join("elsewhere"), lathe.join("elsewhere")) {
            return;
        }
        std::fs::create_dir_all(lathe.join("big")).unwrap();
        let big = std::fs::File::create(lathe.join("big").join(SKILL_FILE)).unwrap();
        big.set_len(50 * 1024 * 1024).unwrap();
        (&big).write_all(b"---\nname: big\ndescription: b\n---\n").unwrap();
        std::fs::create_dir_all(lathe.join("fifo")).unwrap();
        if !crate::platform::testing::fifo(&lathe.join("fifo").join(SKILL_FILE)) {
            return;
        }
        skill_file(&lathe, "broken", "---\nname: broken\n---\nno description");
        skill_file(&lathe, "unclosed", "---\nname: unclosed\ndescription: d\n");
        std::fs::create_dir_all(lathe.join("empty")).unwrap();
        let shared = home.path().join(".agents/skills");
        skill_file(&shared, "notes", "---\nname: notes\ndescription: hidden by lathe's folder\n---\nN.");
        skill_file(&shared, "shared", "---\nname: shared\ndescription: Shared with other agents\n---\nS.");

        let (found, warnings) = warnings_of(|| discover(&project, Some(&user), Some(home.path())));

        let names: Vec<&str> = found.iter().map(|skill| skill.name.as_str()).collect();
        assert_eq!(names, ["review", "deploy", "notes", "shared"], "{warnings}");
        assert_eq!(found[2].description, "Takes notes", "lathe's user folder comes before ~/.agents/skills");
        assert_eq!(found[3].inside, None, "~/.agents/skills is the user's own");
        assert_eq!(found[0].description, "Reviews a diff", "the project's .lathe/skills wins");
        assert_eq!(found[0].inside.as_deref(), Some(project.as_path()));
        assert_eq!(found[2].inside, None, "the user's own");
        for skipped in ["leak", "elsewhere", "big", "fifo", "broken", "unclosed"] {
            assert!(warnings.contains(&format!("{skipped}/SKILL.md")), "{skipped} is named in a warning: {warnings}");
        }
        assert!(warnings.contains("outside the project"), "{warnings}");
        assert!(!warnings.contains("empty"), "a folder without SKILL.md is not a skill: {warnings}");

        let skills = Skills::new(found);
        let listing = skills.listing().unwrap();
        let lines: Vec<&str> = listing.lines().filter(|line| line.starts_with("- ")).collect();
        assert_eq!(lines.len(), 4, "{listing}");
        assert!(lines[0].starts_with("- deploy: Deploys ("), "{listing}");
        assert!(lines[1].starts_with("- notes: Takes notes ("), "{listing}");
        assert_eq!(lines[2], "- review: Reviews a diff (.lathe/skills/review/SKILL.md)", "{listing}");
        let user_path = user.join("skills/notes/SKILL.md");
        assert_eq!(lines[1], format!("- notes: Takes notes ({})", user_path.display()), "the user's in full");
        let shared_path = shared.join("shared/SKILL.md");
        assert_eq!(lines[3], format!("- shared: Shared with other agents ({})", shared_path.display()));
        assert_eq!(
            Some(listing),
            Skills::new(discover(&project, Some(&user), Some(home.path()))).listing(),
            "byte-stable"
        );
        assert_eq!(Skills::default().listing(), None);
        assert_eq!(
            skills.user_folders(),
            [
                authority::Target::of(&user.join("skills/notes")).real,
                authority::Target::of(&shared.join("shared")).real
            ]
        );
    }
}
