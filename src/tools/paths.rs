//! Paths the model names, as text: resolved against the session cwd and
//! normalised lexically, and shown relative to the cwd.
//!
//! Where a path really leads, and whether that is inside the session roots,
//! is [`crate::platform::authority`]'s to judge: [`real_location`] and
//! [`is_inside_roots`] ask it.

use std::path::{Path, PathBuf};

use crate::platform::authority::Target;
pub use crate::platform::paths::{display, normalize, relative_text};

/// The absolute, normalised path the model meant: absolute paths as given,
/// relative ones against `cwd`, `~/` against the home directory; `.` and `..`
/// resolved lexically (for showing; [`Target::resolve`] applies `..` after links).
pub fn resolve(cwd: &Path, path: &str) -> PathBuf {
    normalize(&crate::platform::paths::expand(cwd, path))
}

/// Where `path` (absolute) really leads: every symlink followed, dangling
/// ones through their target's nearest existing ancestor.
pub fn real_location(path: &Path) -> PathBuf {
    Target::of(path).real
}

/// Whether `path` (absolute) really leads inside one of `roots`.
pub fn is_inside_roots(path: &Path, roots: &[PathBuf]) -> bool {
    Target::of(path).is_inside(roots)
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
        if !crate::platform::testing::symlink(outside.path(), root_path.join("link")) {
            return;
        }
        assert!(!is_inside_roots(&root_path.join("link/secret.txt"), &roots), "a symlink leading out is outside");
        assert!(crate::platform::testing::symlink(outside.path().join("new/x"), root_path.join("dangling")));
        assert!(!is_inside_roots(&root_path.join("dangling"), &roots), "so does a dangling one");
    }
}
