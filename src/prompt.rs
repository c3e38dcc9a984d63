//! The system prompt: the prose in `prompts/*.md` (compiled in, reviewed like
//! code) with the session's environment filled in.
//!
//! The prompt is built once per session and kept, so that every request of a
//! session starts with the same bytes (provider prompt caches hit) and nothing
//! volatile, like the time of day, changes between requests. This module does
//! no I/O and knows nothing of ACP or the model API.

use std::path::Path;

const SYSTEM: &str = include_str!("../prompts/system.md");
const ENVIRONMENT: &str = include_str!("../prompts/environment.md");

/// What the prompt says about where the agent runs.
#[derive(Debug, Clone)]
pub struct Environment<'a> {
    /// The session's working directory.
    pub cwd: &'a Path,
    /// The operating system, e.g. `linux`.
    pub os: &'a str,
    /// The day the session started, e.g. `Wed, 02 Dec 2026`.
    pub date: &'a str,
}

impl Environment<'_> {
    /// Today's date, day precision, in the form the prompt uses.
    pub fn today() -> String {
        let stamp = httpdate::fmt_http_date(std::time::SystemTime::now());
        // "Wed, 02 Dec 2026 15:40:00 GMT" -> "Wed, 02 Dec 2026"
        stamp.get(..16).unwrap_or(&stamp).to_owned()
    }
}

/// The complete system prompt for a session.
pub fn system_prompt(environment: &Environment<'_>) -> String {
    let cwd = environment.cwd.display().to_string();
    let filled = ENVIRONMENT.replace("{cwd}", &cwd).replace("{os}", environment.os).replace("{date}", environment.date);
    format!("{}\n{}", SYSTEM.trim_end(), filled.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_the_environment_and_is_deterministic() {
        let env = Environment { cwd: Path::new("/work/project"), os: "linux", date: "Wed, 02 Dec 2026" };
        let prompt = system_prompt(&env);
        assert!(prompt.starts_with("You are lathe"));
        assert!(prompt.contains("Working directory (the project root for this session): /work/project"));
        assert!(prompt.contains("Operating system: linux"));
        assert!(!prompt.contains('{'), "every placeholder is filled: {prompt}");
        assert_eq!(prompt, system_prompt(&env));
    }

    #[test]
    fn today_has_day_precision() {
        let today = Environment::today();
        assert_eq!(today.len(), 16, "{today}");
    }
}
