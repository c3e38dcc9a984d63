//! What makes git, or lathe, run something later: the one list of paths
//! that are read-only to sandboxed commands and that the file tools ask
//! about before writing, in every mode but full-auto (issues 25 and 29).
//!
//! In a session root: the `.git` pointer file, if `.git` is one, and in
//! each git directory (the root's `.git`, the `gitdir:` its pointer file
//! names, the common directory that one's `commondir` names, every
//! submodule's under `modules/`, every linked worktree's under
//! `worktrees/`) its `hooks/`, `config`, `config.worktree`, `info/` and
//! `commondir`; the files their config includes (`[include]`,
//! `[includeIf]`, nested too); every folder `core.hooksPath` names in any
//! of these, when it is set to one in the root; and lathe's own `.lathe/`. The rest of `.git` (objects, refs,
//! the index, logs) stays writable, so `git add` and `git commit` work in
//! the sandbox.
//!
//! Two uses: [`covering`] judges a path a file tool would write (whether it
//! exists or not: a hook that is not there yet is the one to plant);
//! [`mounts`] says what the sandbox's mount namespace makes read-only (what
//! exists: a bind mount needs something to mount on) and which directories
//! it pins in place (bind-mounted onto themselves, so that `mv .git x` and
//! a fresh `.git` cannot route around the read-only parts). A missing
//! `hooks/` or `info/` folder or `config.worktree` of a git directory the
//! sandbox may write is created empty first (git's own layout; git reads
//! an empty `config.worktree` as nothing), so that it too is read-only. A missing `.lathe/` is not created: lathe's commands folder
//! holds prompts, which lathe reads as untrusted anyway.

use std::path::{Component, Path, PathBuf};

/// What a protected path is, which says why it is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// A git hooks folder (or the folder `core.hooksPath` names).
    GitHooks,
    /// A git config file (`config`, `config.worktree`).
    GitConfig,
    /// A git `info/` folder (attributes, excludes, sparse checkout).
    GitInfo,
    /// What says which git directory is used: a `.git` pointer file, `commondir`.
    GitLink,
    /// lathe's own `.lathe/` folder.
    Lathe,
}

impl Protection {
    /// Why writing it asks: a phrase for the permission prompt.
    pub fn why(self) -> &'static str {
        match self {
            Protection::GitHooks => "a git hook: git runs what is here later, outside the sandbox",
            Protection::GitConfig => {
                "git's configuration: it names programs git runs later (hooks, filters, aliases, fsmonitor)"
            }
            Protection::GitInfo => "git's info folder: its attributes choose the filters git runs",
            Protection::GitLink => "it says which git directory, and so which hooks and config, git uses",
            Protection::Lathe => "lathe's own folder: its commands become prompts",
        }
    }
}

/// The names in a git directory that are protected, and what each is.
const IN_GIT_DIR: [(&str, Protection); 5] = [
    ("hooks", Protection::GitHooks),
    ("config", Protection::GitConfig),
    ("config.worktree", Protection::GitConfig),
    ("info", Protection::GitInfo),
    ("commondir", Protection::GitLink),
];

/// The folders of a git directory that are created when missing, so that
/// they can be mounted read-only.
const CREATED_IF_MISSING: [&str; 2] = ["hooks", "info"];

/// lathe's own folder in a root.
pub const LATHE_DIR: &str = ".lathe";

/// Bytes of a `.git` pointer file, a `commondir` file or a git config read
/// at most.
const MAX_READ: u64 = 64 * 1024;

/// Folders looked into below `modules/` (submodules' git directories) at
/// most, and how deep.
const MAX_MODULE_DIRS: usize = 256;
const MAX_MODULE_DEPTH: usize = 8;

/// A protected path and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    /// The path, as it really is (links followed).
    pub path: PathBuf,
    /// What it is.
    pub what: Protection,
}

/// A root's git metadata: the pointer file, if `.git` is one, and its git
/// directories (the one `.git` is or names, and the common one that names).
#[derive(Debug, Default)]
struct GitDirs {
    pointer: Option<PathBuf>,
    dirs: Vec<PathBuf>,
}

/// `path` as it really is (links followed). An existing path is resolved
/// by `realpath(3)`, one system call per component (this runs at every
/// sandboxed command's start); a missing one as the file tools judge it.
fn real(path: &Path) -> PathBuf {
    crate::platform::paths::canonical(path).unwrap_or_else(|_| crate::platform::authority::Target::of(path).real)
}

/// Reads a small text file, at most [`MAX_READ`] bytes of it.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() {
        return None;
    }
    // Room for all of it up front: read in one call (and one that finds
    // the end) rather than in growing steps from 32 bytes.
    let mut text = String::with_capacity(usize::try_from(metadata.len().min(MAX_READ)).unwrap_or(0));
    file.take(MAX_READ).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The path a pointer file's line names (`gitdir: ../x`, or the bare path
/// of `commondir`), relative to `base`.
fn named_path(text: &str, prefix: &str, base: &Path) -> Option<PathBuf> {
    let line = text.lines().next()?.trim();
    let named = line.strip_prefix(prefix)?.trim();
    if named.is_empty() {
        return None;
    }
    Some(real(&base.join(named)))
}

/// The git metadata of `root`, a path as it really is (every caller has
/// resolved it).
fn git_dirs(root: &Path) -> GitDirs {
    let dot_git = root.join(".git");
    let Ok(metadata) = std::fs::symlink_metadata(&dot_git) else { return GitDirs::default() };
    let mut found = GitDirs::default();
    let dir = if metadata.is_file() {
        found.pointer = Some(dot_git.clone());
        read_small(&dot_git).and_then(|text| named_path(&text, "gitdir:", root))
    } else if metadata.is_dir() {
        // Not a link, in a real root: as it really is already (resolving
        // it again costs a system call per component, at every sandboxed
        // command's start).
        Some(dot_git)
    } else {
        Some(real(&dot_git))
    };
    let Some(dir) = dir else { return found };
    if let Some(common) = read_small(&dir.join("commondir")).and_then(|text| named_path(&text, "", &dir)) {
        found.dirs.push(common);
    }
    found.dirs.insert(0, dir);
    found
}

/// The folders `core.hooksPath` names in a git config's text: every value
/// it is given (the last one counts for git, but which is last once
/// included files are read in is git's business: all are protected).
fn hooks_paths(config: &str, root: &Path) -> Vec<PathBuf> {
    config
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            key.trim().eq_ignore_ascii_case("hookspath").then(|| value.trim().trim_matches('"').to_owned())
        })
        .filter(|value| !value.is_empty() && !value.starts_with('~'))
        .map(|value| real(&root.join(value)))
        .collect()
}

/// A git directory's config files (`config`, `config.worktree`) and the
/// files they include: each one's path and text (empty when missing).
struct ConfigFiles {
    own: Vec<(PathBuf, String)>,
    included: Vec<(PathBuf, String)>,
}

impl ConfigFiles {
    fn of_git_dir(dir: &Path) -> ConfigFiles {
        let mut files = ConfigFiles { own: Vec::new(), included: Vec::new() };
        for name in ["config", "config.worktree"] {
            let path = dir.join(name);
            let text = read_small(&path).unwrap_or_default();
            files.included.extend(included(&path, &text));
            files.own.push((path, text));
        }
        files
    }

    /// The included files.
    fn included(&self) -> impl Iterator<Item = &Path> {
        self.included.iter().map(|(path, _)| path.as_path())
    }

    /// Every folder `core.hooksPath` names in any of them.
    fn hooks_paths(&self, root: &Path) -> Vec<PathBuf> {
        self.own.iter().chain(&self.included).flat_map(|(_, text)| hooks_paths(text, root)).collect()
    }
}

/// Included config files followed at most, in all, and how deep.
const MAX_INCLUDES: usize = 16;
const MAX_INCLUDE_DEPTH: usize = 4;

/// The files a git config file includes (`[include] path = ...` and
/// `[includeIf "..."] path = ...`, whatever the condition), as they really
/// are, and theirs in turn: git reads them as part of the config, so they
/// can name programs git runs as well. A relative path is relative to the
/// including file's folder, `~/` is the home directory; whether they exist
/// or not.
fn included(config: &Path, text: &str) -> Vec<(PathBuf, String)> {
    let mut found: Vec<(PathBuf, String)> = Vec::new();
    let mut pending = vec![(config.to_path_buf(), text.to_owned(), 0)];
    while let Some((file, text, depth)) = pending.pop() {
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut in_include = false;
        for line in text.lines() {
            let line = line.trim();
            if let Some(header) = line.strip_prefix('[') {
                let name = header.split(|c: char| c == ']' || c == '"' || c.is_whitespace()).next().unwrap_or("");
                in_include = name.eq_ignore_ascii_case("include") || name.eq_ignore_ascii_case("includeif");
                continue;
            }
            let Some((key, value)) = line.split_once('=') else { continue };
            if !in_include || !key.trim().eq_ignore_ascii_case("path") {
                continue;
            }
            let value = value.trim().trim_matches('"');
            let path = match value.strip_prefix("~/") {
                Some(rest) => match std::env::var_os("HOME") {
                    Some(home) => Path::new(&home).join(rest),
                    None => continue,
                },
                None if value.is_empty() => continue,
                None => base.join(value),
            };
            let path = real(&path);
            if found.len() >= MAX_INCLUDES {
                return found;
            }
            if path != config && !found.iter().any(|(seen, _)| *seen == path) {
                let text = read_small(&path).unwrap_or_default();
                if depth < MAX_INCLUDE_DEPTH {
                    pending.push((path.clone(), text.clone(), depth + 1));
                }
                found.push((path, text));
            }
        }
    }
    found
}

/// Every protected path of `root` that is named by what exists (whether the
/// path itself exists or not): the pointer file, the protected names in its
/// git directories, the `core.hooksPath` folder, `.lathe/`. Submodules and
/// worktrees are judged by [`covering`] and found by [`mounts`].
pub fn of_root(root: &Path) -> Vec<Protected> {
    let root = real(root);
    let git = git_dirs(&root);
    let mut protected = Vec::new();
    if let Some(pointer) = git.pointer {
        protected.push(Protected { path: pointer, what: Protection::GitLink });
    }
    for dir in &git.dirs {
        protected.extend(IN_GIT_DIR.iter().map(|(name, what)| Protected { path: dir.join(name), what: *what }));
        let configs = ConfigFiles::of_git_dir(dir);
        let included =
            configs.included().map(|path| Protected { path: path.to_path_buf(), what: Protection::GitConfig });
        protected.extend(included);
        let hooks = configs.hooks_paths(&root).into_iter().map(|path| Protected { path, what: Protection::GitHooks });
        protected.extend(hooks);
    }
    protected.push(Protected { path: root.join(LATHE_DIR), what: Protection::Lathe });
    protected
}

/// What a path below a git directory's `modules/` or `worktrees/` is, if
/// protected: in a submodule's git directory (however deeply nested, and
/// whatever its name) the protected names; in a worktree's, the same.
fn below_git_dir(relative: &Path) -> Option<Protection> {
    let parts: Vec<&str> = relative
        .components()
        .filter_map(|component| match component {
            Component::Normal(name) => name.to_str(),
            Component::RootDir | Component::CurDir | Component::ParentDir | Component::Prefix(_) => None,
        })
        .collect();
    let (first, rest) = parts.split_first()?;
    if !matches!(*first, "modules" | "worktrees") || rest.len() < 2 {
        return None;
    }
    // Below `modules/<name...>/`: any protected name after the first part.
    rest.iter().skip(1).find_map(|part| IN_GIT_DIR.iter().find(|(name, _)| name == part).map(|(_, what)| *what))
}

/// Whether writing `real` (a path as it really is) changes a protected path
/// of one of `roots`, and which kind.
pub fn covering(real_path: &Path, roots: &[PathBuf]) -> Option<Protection> {
    for root in roots {
        let root = real(root);
        if !real_path.starts_with(&root) && !is_git_metadata_of(real_path, &root) {
            continue;
        }
        if let Some(found) = of_root(&root).into_iter().find(|protected| real_path.starts_with(&protected.path)) {
            return Some(found.what);
        }
        for dir in git_dirs(&root).dirs {
            if let Ok(relative) = real_path.strip_prefix(&dir)
                && let Some(what) = below_git_dir(relative)
            {
                return Some(what);
            }
        }
    }
    None
}

/// Whether `path` lies in the git directories `root` uses (which may be
/// elsewhere, named by a pointer file).
fn is_git_metadata_of(path: &Path, root: &Path) -> bool {
    git_dirs(root).dirs.iter().any(|dir| path.starts_with(dir))
}

/// What the sandbox's mount namespace does for a set of roots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// Bind-mounted onto themselves read-only.
    pub read_only: Vec<PathBuf>,
    /// Bind-mounted onto themselves as they are, so that they cannot be
    /// renamed or removed (a mount point cannot be).
    pub pinned: Vec<PathBuf>,
}

impl Mounts {
    /// Whether there is nothing to mount.
    pub fn is_empty(&self) -> bool {
        self.read_only.is_empty() && self.pinned.is_empty()
    }
}

/// The mounts that keep the protected paths of `roots` read-only to a
/// command that may write beneath `writable` (the roots included): only
/// what exists and lies beneath a writable path (the rest Landlock keeps
/// read-only already). Creates the missing `hooks/` and `info/` folders and
/// `config.worktree` of the git directories it pins.
pub fn mounts(roots: &[PathBuf], writable: &[PathBuf]) -> Mounts {
    let writable: Vec<PathBuf> = writable.iter().chain(roots).map(|path| real(path)).collect();
    let beneath_writable = |path: &Path| writable.iter().any(|dir| path.starts_with(dir));
    let mut mounts = Mounts::default();
    // The roots, resolved once above.
    for root in &writable[writable.len() - roots.len()..] {
        let root = root.clone();
        if !root.is_dir() {
            continue;
        }
        // A root inside another writable path could be moved aside and
        // replaced, its protected parts with it.
        if root.parent().is_some_and(|parent| writable.iter().any(|dir| parent.starts_with(dir))) {
            mounts.pinned.push(root.clone());
        }
        let git = git_dirs(&root);
        if let Some(pointer) = git.pointer {
            mounts.read_only.push(pointer);
        }
        let mut dirs = git.dirs.clone();
        for dir in &git.dirs {
            let mut budget = MAX_MODULE_DIRS;
            module_git_dirs(&dir.join("modules"), 0, &mut budget, &mut dirs);
            if let Ok(entries) = std::fs::read_dir(dir.join("worktrees")) {
                for entry in entries.flatten().take(MAX_MODULE_DIRS) {
                    if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                        protect_existing(&entry.path(), &mut mounts);
                        mounts.pinned.push(entry.path());
                    }
                }
            }
        }
        for dir in dirs.iter().filter(|dir| dir.is_dir() && beneath_writable(dir)) {
            for name in CREATED_IF_MISSING {
                let _ = std::fs::create_dir(dir.join(name));
            }
            // Read by git once `extensions.worktreeConfig` is on, which
            // `git sparse-checkout` turns on by itself: an empty one to pin.
            let _ = std::fs::OpenOptions::new().write(true).create_new(true).open(dir.join("config.worktree"));
            let configs = ConfigFiles::of_git_dir(dir);
            let hooks =
                configs.hooks_paths(&root).into_iter().filter(|hooks| hooks.is_dir() && beneath_writable(hooks));
            mounts.read_only.extend(hooks);
            // The files its config includes (a missing one cannot be
            // mounted on: see SECURITY.md).
            let included = configs.included().filter(|file| file.is_file() && beneath_writable(file));
            mounts.read_only.extend(included.map(Path::to_path_buf));
            mounts.pinned.push(dir.clone());
            protect_existing(dir, &mut mounts);
        }
        let lathe = root.join(LATHE_DIR);
        if std::fs::symlink_metadata(&lathe).is_ok_and(|metadata| metadata.is_dir()) {
            mounts.read_only.push(lathe);
        }
    }
    for list in [&mut mounts.read_only, &mut mounts.pinned] {
        list.retain(|path| beneath_writable(path));
        list.sort();
        list.dedup();
    }
    // A pinned directory that is also read-only needs only the read-only mount.
    let read_only = mounts.read_only.clone();
    mounts.pinned.retain(|path| !read_only.contains(path));
    mounts
}

/// The protected names that exist in git directory `dir`, as read-only mounts.
fn protect_existing(dir: &Path, mounts: &mut Mounts) {
    for (name, _) in IN_GIT_DIR {
        let path = dir.join(name);
        // Never through a link: a link here is judged where it leads, which
        // is either outside the writable paths or protected by its own name.
        if std::fs::symlink_metadata(&path).is_ok_and(|metadata| !metadata.file_type().is_symlink()) {
            mounts.read_only.push(path);
        }
    }
}

/// The submodules' git directories below `dir` (a `modules/` folder or one
/// below it): the folders holding a `HEAD` file, with theirs in turn.
fn module_git_dirs(dir: &Path, depth: usize, budget: &mut usize, found: &mut Vec<PathBuf>) {
    if depth > MAX_MODULE_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        *budget -= 1;
        let path = entry.path();
        if path.join("HEAD").is_file() {
            found.push(path.clone());
            module_git_dirs(&path.join("modules"), depth + 1, budget, found);
        } else {
            // A submodule named `a/b` lives in `modules/a/b`.
            module_git_dirs(&path, depth + 1, budget, found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_dir(dir: &Path) {
        std::fs::create_dir_all(dir.join("hooks")).unwrap();
        std::fs::create_dir_all(dir.join("objects")).unwrap();
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(dir.join("config"), "[core]\n\tbare = false\n").unwrap();
    }

    /// The same list judges writes and makes mounts: hooks, config, info,
    /// the pointer file and the gitdir it names, submodules' and worktrees'
    /// git directories, `core.hooksPath`, `.lathe/`; not objects, refs, the
    /// index or the work tree.
    #[test]
    fn one_list_for_writes_and_mounts() {
        let top = tempfile::tempdir().unwrap();
        // The authority's spelling of a real path (`covering` takes one).
        let top = crate::platform::paths::canonical(top.path()).unwrap();
        let main = top.join("main");
        let linked = top.join("linked");
        git_dir(&main.join(".git"));
        std::fs::write(
            main.join(".git/config"),
            "[core]\n\thooksPath = .husky\n[extensions]\n\tworktreeConfig = true\n",
        )
        .unwrap();
        std::fs::create_dir_all(main.join(".husky")).unwrap();
        git_dir(&main.join(".git/modules/libs/a"));
        git_dir(&main.join(".git/worktrees/linked"));
        std::fs::write(main.join(".git/worktrees/linked/commondir"), "../..\n").unwrap();
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(linked.join(".git"), format!("gitdir: {}\n", main.join(".git/worktrees/linked").display()))
            .unwrap();
        std::fs::create_dir_all(main.join(".lathe/commands")).unwrap();
        let roots = [main.clone()];

        let protected = [
            (".git/hooks/pre-commit", Protection::GitHooks),
            (".git/config", Protection::GitConfig),
            (".git/config.worktree", Protection::GitConfig),
            (".git/info/attributes", Protection::GitInfo),
            (".git/modules/libs/a/hooks/post-checkout", Protection::GitHooks),
            (".git/modules/libs/a/config", Protection::GitConfig),
            (".git/worktrees/linked/config.worktree", Protection::GitConfig),
            (".git/worktrees/linked/commondir", Protection::GitLink),
            (".husky/pre-commit", Protection::GitHooks),
            (".lathe/commands/x.md", Protection::Lathe),
        ];
        for (path, what) in protected {
            assert_eq!(covering(&main.join(path), &roots), Some(what), "{path}");
        }
        for free in [".git/objects/ab/cd", ".git/index", ".git/refs/heads/main", ".git/HEAD", "src/main.rs", "new.txt"]
        {
            assert_eq!(covering(&main.join(free), &roots), None, "{free}");
        }
        // Through a pointer file: the file itself, and the git directories it leads to.
        let linked_roots = [linked.clone()];
        assert_eq!(covering(&linked.join(".git"), &linked_roots), Some(Protection::GitLink));
        assert_eq!(covering(&main.join(".git/hooks/x"), &linked_roots), Some(Protection::GitHooks), "the common dir");
        assert_eq!(covering(&main.join(".git/worktrees/linked/config"), &linked_roots), Some(Protection::GitConfig));
        assert_eq!(covering(&top.join("elsewhere"), &roots), None);

        // Mounts: what exists, beneath the writable paths; missing folders made.
        std::fs::remove_dir(main.join(".git/hooks")).unwrap();
        let mounts = mounts(&roots, &[top.join("unrelated")]);
        let relative = |paths: &[PathBuf]| -> Vec<String> {
            paths.iter().map(|path| crate::platform::paths::relative_text(path.strip_prefix(&main).unwrap())).collect()
        };
        assert_eq!(
            relative(&mounts.read_only),
            [
                ".git/config",
                ".git/config.worktree",
                ".git/hooks",
                ".git/info",
                ".git/modules/libs/a/config",
                ".git/modules/libs/a/config.worktree",
                ".git/modules/libs/a/hooks",
                ".git/modules/libs/a/info",
                ".git/worktrees/linked/commondir",
                ".git/worktrees/linked/config",
                ".git/worktrees/linked/hooks",
                ".husky",
                ".lathe",
            ]
        );
        assert_eq!(relative(&mounts.pinned), [".git", ".git/modules/libs/a", ".git/worktrees/linked"]);
        assert!(main.join(".git/hooks").is_dir() && main.join(".git/info").is_dir(), "made to be mounted");
        // A root inside a writable path is pinned too.
        let pinned = super::mounts(&roots, std::slice::from_ref(&top)).pinned;
        assert!(pinned.contains(&main), "{pinned:?}");
        // Nothing beneath no writable path: Landlock keeps it read-only already.
        assert!(super::mounts(&[], &[top.join("unrelated")]).is_empty());
    }

    /// The files a git config includes are protected like the config: git
    /// reads what they say (hooks paths, fsmonitor, aliases) as its own.
    /// Relative to the including file, nested, whether they exist or not
    /// for the file tools; mounted read-only where they exist.
    #[test]
    fn included_config_files_are_protected() {
        let top = tempfile::tempdir().unwrap();
        // The authority's spelling of a real path (`covering` takes one).
        let root = crate::platform::paths::canonical(top.path()).unwrap();
        git_dir(&root.join(".git"));
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\tbare = false\n\tpath = not-an-include\n[include]\n\tpath = ../shared.gitconfig\n\
             [includeIf \"gitdir:/elsewhere/\"]\n\tpath = missing.cfg\n",
        )
        .unwrap();
        std::fs::write(root.join("shared.gitconfig"), "[include]\n\tpath = nested.cfg\n").unwrap();
        std::fs::write(root.join("nested.cfg"), "[core]\n\thooksPath = tools/hooks\n").unwrap();
        std::fs::create_dir_all(root.join("tools/hooks")).unwrap();
        let roots = [root.clone()];
        for (path, what) in [
            ("shared.gitconfig", Some(Protection::GitConfig)),
            ("nested.cfg", Some(Protection::GitConfig)),
            (".git/missing.cfg", Some(Protection::GitConfig)),
            ("tools/hooks/pre-commit", Some(Protection::GitHooks)),
            ("not-an-include", None),
            ("README", None),
        ] {
            assert_eq!(covering(&root.join(path), &roots), what, "{path}");
        }
        let read_only = mounts(&roots, &[]).read_only;
        for path in ["shared.gitconfig", "nested.cfg", "tools/hooks"] {
            assert!(read_only.contains(&root.join(path)), "{path}: {read_only:?}");
        }
        assert!(!read_only.contains(&root.join(".git/missing.cfg")), "nothing to mount on");
    }
}
