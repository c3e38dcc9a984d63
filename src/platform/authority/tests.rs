//! The path authority's tests, on Unix: links, FIFOs and devices are made
//! with Unix calls. (Windows runs its own spellings in `windows_tests.rs`.)

use std::os::unix::fs::{PermissionsExt as _, symlink};

use rustix::fs::OFlags;

use super::sys::{open_nofollow, open_nofollow_walk};
use super::*;

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    project: PathBuf,
    outside: PathBuf,
}

/// `<tmp>/project` (the root) and `<tmp>/outside`, canonical.
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let project = root.join("project");
    let outside = root.join("outside");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(project.join("src/lib.rs"), "lib").unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    Tree { _dir: dir, root, project, outside }
}

fn mkfifo(path: &Path) {
    assert!(crate::platform::testing::fifo(path));
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Missing,
    File,
    Dir,
    Special,
    Unresolvable,
}

fn kind(found: &Found) -> Kind {
    match found {
        Found::Missing => Kind::Missing,
        Found::File { .. } => Kind::File,
        Found::Directory => Kind::Dir,
        Found::Special(_) => Kind::Special,
        Found::Unresolvable(_) => Kind::Unresolvable,
    }
}

/// The resolver, table-tested: each path names where it really leads,
/// what is there, and whether that is inside the project.
#[test]
fn the_resolver_table() {
    let t = tree();
    let (p, o) = (&t.project, &t.outside);
    symlink(o.join("secret.txt"), p.join("to_secret")).unwrap();
    symlink(o.join("newdir/x"), p.join("dangling")).unwrap();
    symlink("src/lib.rs", p.join("relative")).unwrap();
    symlink("relative", p.join("chain")).unwrap();
    symlink("chain", p.join("chain2")).unwrap();
    symlink(o, p.join("out_dir")).unwrap();
    symlink("../outside", p.join("up_dir")).unwrap();
    symlink("loop_b", p.join("loop_a")).unwrap();
    symlink("loop_a", p.join("loop_b")).unwrap();
    symlink("src", p.join("src_link")).unwrap();
    std::fs::create_dir_all(o.join("deep/er")).unwrap();
    symlink(o.join("deep/er"), p.join("deeper")).unwrap();
    symlink("/proc/self/environ", p.join("environ")).unwrap();
    mkfifo(&p.join("fifo"));
    symlink("/dev/zero", p.join("zero")).unwrap();
    let cases: &[(&str, Option<PathBuf>, Kind, bool)] = &[
        ("src/lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
        ("src/new/deeper/file.rs", Some(p.join("src/new/deeper/file.rs")), Kind::Missing, true),
        ("src/../src/lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
        ("../outside/secret.txt", Some(o.join("secret.txt")), Kind::File, false),
        ("to_secret", Some(o.join("secret.txt")), Kind::File, false),
        // A dangling link leads to its target, through its nearest existing ancestor.
        ("dangling", Some(o.join("newdir/x")), Kind::Missing, false),
        ("relative", Some(p.join("src/lib.rs")), Kind::File, true),
        ("chain2", Some(p.join("src/lib.rs")), Kind::File, true),
        ("out_dir/secret.txt", Some(o.join("secret.txt")), Kind::File, false),
        ("out_dir/new/file", Some(o.join("new/file")), Kind::Missing, false),
        ("up_dir/secret.txt", Some(o.join("secret.txt")), Kind::File, false),
        // `..` after a link climbs from where the link leads, not from its name.
        ("deeper/../secret.txt", Some(o.join("deep/secret.txt")), Kind::Missing, false),
        ("src_link/../src/lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
        // `..` inside what does not exist yet is lexical.
        ("src/new/../lib.rs", Some(p.join("src/lib.rs")), Kind::File, true),
        ("loop_a", None, Kind::Unresolvable, true),
        ("src/lib.rs/x", None, Kind::Unresolvable, true),
        ("fifo", Some(p.join("fifo")), Kind::Special, true),
        ("zero", Some(PathBuf::from("/dev/zero")), Kind::Special, false),
        ("environ", None, Kind::File, false),
        ("/etc/../etc/passwd", Some(PathBuf::from("/etc/passwd")), Kind::File, false),
    ];
    let roots = vec![p.clone()];
    for (asked, real, expected_kind, inside) in cases {
        let target = Target::resolve(p, asked);
        if let Some(real) = real {
            assert_eq!(&target.real, real, "{asked}");
        }
        assert_eq!(kind(&target.found), *expected_kind, "{asked}: {:?}", target.found);
        if *expected_kind != Kind::Unresolvable || *inside {
            assert_eq!(target.is_inside(&roots), *inside, "{asked} -> {}", target.real.display());
        }
    }
    // The root itself may be reached through a link.
    let link_root = t.root.join("project_link");
    symlink(p, &link_root).unwrap();
    assert!(Target::of(&p.join("src/lib.rs")).is_inside(std::slice::from_ref(&link_root)));
    assert!(Target::resolve(&link_root, "src/lib.rs").is_inside(&roots));
}

/// Hard links: inside by name for a write by rename; outside for a write
/// in place, which would change the other names too.
#[test]
fn hard_links_are_outside_for_writes_in_place() {
    let t = tree();
    std::fs::hard_link(t.outside.join("secret.txt"), t.project.join("shared")).unwrap();
    let roots = vec![t.project.clone()];
    let target = Target::resolve(&t.project, "shared");
    assert!(matches!(target.found, Found::File { links: 2, .. }));
    assert!(target.is_inside(&roots));
    assert!(!target.clone().written_in_place(true).is_inside(&roots));
    let single = Target::resolve(&t.project, "src/lib.rs").written_in_place(true);
    assert!(single.is_inside(&roots));
}

#[test]
fn the_name_shown_says_where_a_link_leads() {
    let t = tree();
    symlink(t.outside.join("newdir/x"), t.project.join("notes.md")).unwrap();
    symlink("src/lib.rs", t.project.join("lib_link")).unwrap();
    let shown = |asked: &str| Target::resolve(&t.project, asked).shown(&t.project);
    assert_eq!(shown("notes.md"), format!("notes.md → {}", t.outside.join("newdir/x").display()));
    assert_eq!(shown("lib_link"), "lib_link → src/lib.rs");
    assert_eq!(shown("src/lib.rs"), "src/lib.rs");
    assert_eq!(shown("src/../src/lib.rs"), "src/lib.rs");
    assert!(!Target::resolve(&t.project, "src/lib.rs").leads_elsewhere(&t.project));
}

/// Swapping a name between judging and use never makes a write land
/// outside: the table covers each swap an attacker can make.
#[test]
fn swaps_between_judge_and_use_never_write_outside() {
    type Swap = fn(&Tree);
    let swaps: &[(&str, &str, Swap)] = &[
        // Absent when judged, a link to outside when written.
        ("notes.md", "a new file becomes a link", |t| {
            symlink(t.outside.join("notes.md"), t.project.join("notes.md")).unwrap()
        }),
        ("notes.md", "a new file becomes a dangling link", |t| {
            symlink(t.outside.join("newdir/x"), t.project.join("notes.md")).unwrap()
        }),
        // A directory on the way becomes a link to outside.
        ("src/new.rs", "a directory becomes a link", |t| {
            std::fs::rename(t.project.join("src"), t.root.join("moved")).unwrap();
            symlink(&t.outside, t.project.join("src")).unwrap();
        }),
        ("src/a/b/new.rs", "the anchor becomes a link", |t| {
            std::fs::rename(t.project.join("src"), t.root.join("moved")).unwrap();
            symlink(&t.outside, t.project.join("src")).unwrap();
        }),
        // A missing directory appears as a link to outside.
        ("src/a/new.rs", "a missing directory appears as a link", |t| {
            symlink(&t.outside, t.project.join("src/a")).unwrap()
        }),
        // An existing file becomes a link to outside.
        ("src/lib.rs", "a file becomes a link", |t| {
            std::fs::remove_file(t.project.join("src/lib.rs")).unwrap();
            symlink(t.outside.join("secret.txt"), t.project.join("src/lib.rs")).unwrap();
        }),
        // A directory is replaced by another real directory.
        ("src/new.rs", "a directory is replaced", |t| {
            std::fs::rename(t.project.join("src"), t.root.join("moved")).unwrap();
            std::fs::create_dir(t.project.join("src")).unwrap();
        }),
    ];
    for (asked, what, swap) in swaps {
        let t = tree();
        let roots = vec![t.project.clone()];
        let target = Target::resolve(&t.project, asked);
        assert!(target.is_inside(&roots), "{what}: judged inside");
        swap(&t);
        let before = listing(&t.outside);
        let written = target.write_atomic(b"pwned");
        assert_eq!(listing(&t.outside), before, "{what}: nothing outside changed ({written:?})");
        assert_eq!(std::fs::read_to_string(t.outside.join("secret.txt")).unwrap(), "secret", "{what}");
        if let Err(err) = written {
            assert!(matches!(err, GuardError::Changed | GuardError::NotFound), "{what}: {err:?}");
        }
        // The editor's in-place write is refused or stays inside too.
        let t = tree();
        let target = Target::resolve(&t.project, asked).written_in_place(true);
        swap(&t);
        let before = listing(&t.outside);
        let _ = target.prepare_in_place();
        assert_eq!(listing(&t.outside), before, "{what}: no directory created outside");
    }
}

/// Every file below `dir` with its content.
fn listing(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path.clone());
                found.push((path, None));
            } else {
                found.push((path.clone(), std::fs::read(&path).ok()));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn writes_are_atomic_keep_modes_and_create_directories() {
    let t = tree();
    let target = Target::resolve(&t.project, "a/b/c.txt");
    target.write_atomic(b"one").unwrap();
    assert_eq!(std::fs::read_to_string(t.project.join("a/b/c.txt")).unwrap(), "one");
    let names: Vec<_> = std::fs::read_dir(t.project.join("a/b")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![OsString::from("c.txt")], "no temporary file is left");

    let lib = t.project.join("src/lib.rs");
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o640)).unwrap();
    Target::resolve(&t.project, "src/lib.rs").write_atomic(b"new").unwrap();
    assert_eq!(std::fs::metadata(&lib).unwrap().permissions().mode() & 0o7777, 0o640);

    // Through a link inside: the link stays and its target is rewritten.
    symlink("src/lib.rs", t.project.join("lib_link")).unwrap();
    Target::resolve(&t.project, "lib_link").write_atomic(b"via link").unwrap();
    assert!(std::fs::symlink_metadata(t.project.join("lib_link")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&lib).unwrap(), "via link");
}

/// A write the user allowed outside the roots works, on the object judged.
#[test]
fn allowed_writes_outside_the_roots_work() {
    let t = tree();
    symlink(t.outside.join("newdir/x"), t.project.join("notes.md")).unwrap();
    let target = Target::resolve(&t.project, "notes.md");
    assert!(!target.is_inside(std::slice::from_ref(&t.project)));
    target.write_atomic(b"allowed").unwrap();
    assert_eq!(std::fs::read_to_string(t.outside.join("newdir/x")).unwrap(), "allowed");
    assert!(std::fs::symlink_metadata(t.project.join("notes.md")).unwrap().file_type().is_symlink());
}

#[test]
fn special_files_are_refused_without_blocking() {
    let t = tree();
    mkfifo(&t.project.join("fifo"));
    let fifo = Target::resolve(&t.project, "fifo");
    assert!(matches!(fifo.read_all(10), Err(GuardError::Special("a named pipe (FIFO)"))));
    assert!(matches!(fifo.write_atomic(b"x"), Err(GuardError::Special(_))));
    // A FIFO swapped in after judging is refused on the open descriptor, without blocking.
    let judged = Target::resolve(&t.project, "src/lib.rs");
    std::fs::remove_file(t.project.join("src/lib.rs")).unwrap();
    mkfifo(&t.project.join("src/lib.rs"));
    assert!(matches!(judged.read_all(10), Err(GuardError::Special(_))));
    assert!(matches!(Target::of(Path::new("/dev/zero")).read_all(10), Err(GuardError::Special("a device"))));
}

/// Before the editor is asked to read: nothing on disk is fine (it may
/// hold an unsaved buffer), a link or FIFO swapped in is not.
#[test]
fn editor_reads_are_checked_again() {
    let t = tree();
    assert!(Target::resolve(&t.project, "new/unsaved.md").check_readable().is_ok());
    assert!(Target::resolve(&t.project, "src/lib.rs").check_readable().is_ok());
    let judged = Target::resolve(&t.project, "src/lib.rs");
    std::fs::remove_file(t.project.join("src/lib.rs")).unwrap();
    symlink(t.outside.join("secret.txt"), t.project.join("src/lib.rs")).unwrap();
    assert!(matches!(judged.check_readable(), Err(GuardError::Changed)));
    let judged = Target::resolve(&t.project, "pipe");
    mkfifo(&t.project.join("pipe"));
    assert!(matches!(judged.check_readable(), Err(GuardError::Special(_))));
}

#[test]
fn the_walk_without_openat2_refuses_links_too() {
    let t = tree();
    symlink(&t.outside, t.project.join("out")).unwrap();
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    assert!(open_nofollow_walk(&t.project.join("src"), flags).is_ok());
    assert!(matches!(open_nofollow_walk(&t.project.join("out"), flags), Err(GuardError::Changed)));
    let through = open_nofollow_walk(&t.project.join("out/secret.txt"), OFlags::RDONLY | OFlags::CLOEXEC);
    assert!(through.is_err(), "a link in the middle is refused too");
    assert!(matches!(open_nofollow(&t.project.join("out/secret.txt")), Err(GuardError::Changed)));
}

#[test]
fn workspace_files_stay_inside_and_small() {
    let t = tree();
    let roots = vec![t.project.clone()];
    let area = Area::Within(&roots);
    std::fs::write(t.project.join("AGENTS.md"), "x".repeat(100)).unwrap();
    let read = read_workspace_file(&t.project.join("AGENTS.md"), area, 10).unwrap().unwrap();
    assert_eq!((read.text.as_str(), read.omitted), ("xxxxxxxxxx", 90));
    assert_eq!(read_workspace_file(&t.project.join("missing.md"), area, 10).unwrap(), None);
    symlink("/proc/self/environ", t.project.join("environ.md")).unwrap();
    assert!(matches!(read_workspace_file(&t.project.join("environ.md"), area, 10), Err(Refusal::Outside(_))));
    symlink(t.outside.join("secret.txt"), t.project.join("secret.md")).unwrap();
    assert!(matches!(read_workspace_file(&t.project.join("secret.md"), area, 10), Err(Refusal::Outside(_))));
    // The user's own files may lead anywhere, but are still checked.
    let trusted = read_workspace_file(&t.project.join("secret.md"), Area::Trusted, 10).unwrap().unwrap();
    assert_eq!(trusted.text, "secret");
    symlink("/dev/zero", t.project.join("zero.md")).unwrap();
    assert!(matches!(read_workspace_file(&t.project.join("zero.md"), Area::Trusted, 10), Err(Refusal::Unreadable(_))));
    mkfifo(&t.project.join("fifo.md"));
    assert!(matches!(read_workspace_file(&t.project.join("fifo.md"), area, 10), Err(Refusal::Unreadable(_))));
}
