//! Paths the model names: resolved against the session cwd, normalised, shown
//! relative to the cwd, and judged inside or outside the session roots.
//!
//! "Inside" is decided on the real location: symlinks are followed (for the
//! deepest part of the path that exists), so a link inside the project that
//! points elsewhere counts as outside. `..` is resolved lexically first.
//!
//! A hard link has no "real" location to follow: every name of a file is
//! equally its own, so one inside a root counts as inside. Reading it reads
//! the shared content, which someone already placed in the project; writing
//! it replaces that name by rename (see [`super::local`]), so the names
//! elsewhere keep the old content and nothing outside the roots changes.

use std::path::{Component, Path, PathBuf};

/// The absolute, normalised path the model meant: absolute paths as given,
/// relative ones against `cwd`, `~/` against the home directory; `.` and `..`
/// resolved lexically.
pub fn resolve(cwd: &Path, path: &str) -> PathBuf {
    let expanded = match path.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(rest)),
        None => None,
    };
    let joined = match expanded {
        Some(path) => path,
        None if Path::new(path).is_absolute() => PathBuf::from(path),
        None => cwd.join(path),
    };
    normalize(&joined)
}

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

/// The path as the user would write it: relative to `cwd` when inside it.
pub fn display(path: &Path, cwd: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
        Ok(relative) => relative.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// The real location of `path`: the deepest existing ancestor canonicalised
/// (symlinks followed), with the rest appended.
pub fn real_location(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut real = real;
            for part in rest.iter().rev() {
                real.push(part);
            }
            return normalize(&real);
        }
        match (existing.file_name().map(ToOwned::to_owned), existing.parent().map(Path::to_path_buf)) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return normalize(path),
        }
    }
}

/// Whether `path` (absolute, normalised) lies inside one of `roots`, judged on
/// real locations.
pub fn is_inside_roots(path: &Path, roots: &[PathBuf]) -> bool {
    let real = real_location(path);
    roots.iter().any(|root| real.starts_with(real_location(root)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution() {
        let cwd = Path::new("/work/p");
        assert_eq!(resolve(cwd, "src/main.rs"), PathBuf::from("/work/p/src/main.rs"));
        assert_eq!(resolve(cwd, "./src/../lib.rs"), PathBuf::from("/work/p/lib.rs"));
        assert_eq!(resolve(cwd, "../../../etc/passwd"), PathBuf::from("/etc/passwd"));
        assert_eq!(resolve(cwd, "/abs/x"), PathBuf::from("/abs/x"));
        assert_eq!(display(Path::new("/work/p/src/a.rs"), cwd), "src/a.rs");
        assert_eq!(display(Path::new("/work/p"), cwd), ".");
        assert_eq!(display(Path::new("/etc/x"), cwd), "/etc/x");
    }

    #[test]
    fn roots_and_symlinks() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root_path = root.path().to_path_buf();
        std::fs::create_dir(root_path.join("src")).unwrap();
        let roots = vec![root_path.clone()];
        assert!(is_inside_roots(&root_path.join("src/new_file.rs"), &roots));
        assert!(is_inside_roots(&root_path.join("not/yet/created.rs"), &roots));
        assert!(!is_inside_roots(outside.path(), &roots));
        assert!(!is_inside_roots(&resolve(&root_path, "../elsewhere"), &roots));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside.path(), root_path.join("link")).unwrap();
            assert!(!is_inside_roots(&root_path.join("link/secret.txt"), &roots), "a symlink leading out is outside");
        }
    }
}
