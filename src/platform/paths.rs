//! Path text, without touching the file system: `.` and `..` resolved
//! lexically, and a path shown the way the user would write it.
//!
//! The spelling rule, in one place: a path RELATIVE to a root or the working
//! directory is shown to the model and to the user with `/` between its
//! names on every system ([`relative_text`], [`display`]), as git prints
//! paths on Windows and as editors' relative paths are; an ABSOLUTE path
//! stays in the system's own spelling (`C:\Users\...`), and so do the
//! absolute `path`/`locations` fields ACP carries. Tool arguments accept
//! `/` and `\` alike on Windows (a [`Path`] does).
//!
//! On Windows a [`Path`] already accepts `/` and `\` and keeps its prefix
//! (`C:`, `\\?\C:`, `\\server\share`) as the first component, which both
//! functions carry through unchanged. Which real object a path names (links,
//! case, 8.3 names) is the path authority's question, not this module's.

use std::path::{Component, Path, PathBuf};

/// Removes `.` and resolves `..` without touching the file system.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                // `..` at the root stays at the root; a relative path keeps its leading `..`.
                if !out.pop() && !out.has_root() {
                    out.push(component);
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The path a user or model named, made absolute: `~/` (and `~\` where `\`
/// separates, on Windows) against the home folder, an absolute path as
/// given (`C:\x`, `\\?\C:\x`, `\\server\share\x`, `/x` on Unix), anything
/// else against `cwd`. Not normalised: `..` is the authority's to apply
/// after links.
pub fn expand(cwd: &Path, asked: &str) -> PathBuf {
    let home_relative = asked.strip_prefix('~').filter(|rest| rest.starts_with(std::path::is_separator));
    if let Some(rest) = home_relative
        && let Some(home) = super::folders::home()
    {
        return home.join(rest.trim_start_matches(std::path::is_separator));
    }
    if Path::new(asked).is_absolute() { PathBuf::from(asked) } else { cwd.join(asked) }
}

/// `std::fs::canonicalize` in the spelling the path authority gives real
/// paths: on Windows without `\\?\` where the plain form names the same
/// (`dunce`'s rule), so that a canonical root and a target's real path
/// compare (`\\?\C:\p` does not start with `C:\p`, nor the other way).
pub fn canonical(path: &Path) -> std::io::Result<PathBuf> {
    #[cfg(windows)]
    let real = dunce::canonicalize(path);
    #[cfg(not(windows))]
    let real = std::fs::canonicalize(path);
    real
}

/// The path as the user would write it: relative to `cwd` when inside it,
/// then with `/` between its names ([`relative_text`]); a path outside `cwd`
/// in full, in the system's spelling. On Windows `\\?\C:\p\a` is inside
/// `C:\p` and the other way round (an editor may send either spelling).
pub fn display(path: &Path, cwd: &Path) -> String {
    match plain(path).strip_prefix(plain(cwd)) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
        Ok(relative) => relative_text(relative),
        Err(_) if path.is_relative() => relative_text(path),
        Err(_) => path.display().to_string(),
    }
}

/// The path without `\\?\` where the plain form names the same (Windows;
/// `dunce`'s rule), for comparing spellings; the path itself elsewhere.
fn plain(path: &Path) -> &Path {
    #[cfg(windows)]
    let plain = dunce::simplified(path);
    #[cfg(not(windows))]
    let plain = path;
    plain
}

/// A relative path as text with `/` between its names on every system
/// (`nested/deep/mod.rs`, never `nested\deep\mod.rs`). Where `/` is the
/// only separator this is the path as it is: a `\` there is part of a name.
pub fn relative_text(relative: &Path) -> String {
    let text = relative.display().to_string();
    if std::path::MAIN_SEPARATOR == '/' { text } else { text.replace(std::path::MAIN_SEPARATOR, "/") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A canonical root holds the real paths the authority gives what is
    /// in it (on Windows both without `\\?\`), so the roots' protected
    /// paths and checkpoints' walks compare with judged targets.
    #[test]
    fn canonical_roots_hold_the_authoritys_real_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("a.txt"), "a").unwrap();
        let root = canonical(dir.path()).unwrap();
        let real = super::super::authority::Target::of(&dir.path().join("sub").join("a.txt")).real;
        assert!(real.starts_with(&root), "{} in {}", real.display(), root.display());
        assert_eq!(canonical(&dir.path().join("sub")).unwrap(), root.join("sub"));
    }

    #[test]
    fn normalisation_is_lexical() {
        let root = std::env::temp_dir();
        let base = root.join("p");
        assert_eq!(normalize(&base.join(".").join("src").join("..").join("lib.rs")), base.join("lib.rs"));
        let top = root.ancestors().last().unwrap();
        assert_eq!(normalize(&top.join("..").join("x")), top.join("x"), "`..` at the root stays there");
        assert_eq!(normalize(Path::new("../x/./y")), PathBuf::from("../x/y"));
    }

    #[test]
    fn expanded_against_home_or_cwd() {
        let cwd = std::env::temp_dir().join("p");
        assert_eq!(expand(&cwd, "src/a.rs"), cwd.join("src/a.rs"));
        let elsewhere = std::env::temp_dir().join("q");
        assert_eq!(expand(&cwd, elsewhere.to_str().unwrap()), elsewhere);
        if let Some(home) = crate::platform::folders::home() {
            assert_eq!(expand(&cwd, "~/notes.md"), home.join("notes.md"));
            let backslash = if cfg!(windows) { home.join("notes.md") } else { cwd.join("~\\notes.md") };
            assert_eq!(expand(&cwd, "~\\notes.md"), backslash, "`~\\` only where `\\` separates");
        }
        assert_eq!(expand(&cwd, "~notes"), cwd.join("~notes"), "a name that starts with ~");
    }

    #[test]
    fn shown_relative_to_the_cwd() {
        let cwd = std::env::temp_dir().join("p");
        assert_eq!(display(&cwd.join("src").join("a.rs"), &cwd), "src/a.rs", "relative: `/` on every system");
        assert_eq!(display(&cwd, &cwd), ".");
        let elsewhere = std::env::temp_dir().join("q").join("x");
        assert_eq!(display(&elsewhere, &cwd), elsewhere.display().to_string(), "absolute: the system's spelling");
        assert_eq!(display(&Path::new("src").join("a.rs"), &cwd), "src/a.rs");
        if cfg!(windows) {
            let (plain, verbatim) = (Path::new(r"C:\p"), Path::new(r"\\?\C:\p"));
            assert_eq!(display(&verbatim.join("src").join("a.rs"), plain), "src/a.rs", "`\\\\?\\` is the same folder");
            assert_eq!(display(&plain.join("a.rs"), verbatim), "a.rs");
        }
    }

    /// A relative path joined with the system's separator is shown with
    /// `/`. Only where `\` separates (Windows) does this check a
    /// conversion; on Unix `\` is part of a name and must stay.
    #[test]
    fn relative_paths_are_shown_with_slashes() {
        let joined = Path::new("nested").join("deep").join("mod.rs");
        assert_eq!(relative_text(&joined), "nested/deep/mod.rs");
        let backslashed = PathBuf::from(r"nested\deep\mod.rs");
        let expected = if std::path::MAIN_SEPARATOR == '\\' { "nested/deep/mod.rs" } else { r"nested\deep\mod.rs" };
        assert_eq!(relative_text(&backslashed), expected, "a `\\` is a separator only where the system says so");
    }
}
