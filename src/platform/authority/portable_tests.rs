//! The path authority's tests that need nothing a system may lack (no
//! links, FIFOs or modes): they run on every system, Windows under wine
//! included, with that system's own spellings (`Path::join`, the temp
//! folder's prefix).

use std::path::PathBuf;

use super::*;

/// A fresh folder, by its real name as the authority spells it (on
/// Windows `C:\...`, the on-disk case, long names).
fn root() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = Target::of(&std::fs::canonicalize(dir.path()).unwrap()).real;
    (dir, root)
}

#[test]
fn writes_reads_and_removals_go_through_the_handles() {
    let (_dir, root) = root();
    let path = root.join("a").join("b").join("c.txt");
    let target = Target::of(&path);
    assert_eq!(target.found, Found::Missing, "{target:?}");
    assert!(target.is_inside(std::slice::from_ref(&root)), "{target:?}");
    target.write_atomic(b"one\r\ntwo\r\n").unwrap();
    let written = Target::of(&path);
    assert!(matches!(written.found, Found::File { links: 1, size: 10, .. }), "{written:?}");
    assert_eq!(written.read_all(100).unwrap(), b"one\r\ntwo\r\n");
    assert!(matches!(written.read_all(3), Err(GuardError::TooLarge { size: 10, limit: 3 })));
    assert_eq!(written.read_prefix(3).unwrap(), (b"one".to_vec(), 10));
    written.write_atomic(b"three").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"three");
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "no temporary file is left: {names:?}");
    written.check_readable().unwrap();
    written.prepare_in_place().unwrap();
    written.remove_file().unwrap();
    assert!(!path.exists());
    written.remove_file().unwrap();
    assert!(matches!(Target::of(&root.join("a")).read_all(10), Err(GuardError::IsDirectory)));
}

#[test]
fn dot_dot_and_hard_links_are_judged_on_the_real_location() {
    let (_dir, root) = root();
    let project = root.join("project");
    std::fs::create_dir(&project).unwrap();
    let roots = std::slice::from_ref(&project);
    let up = Target::of(&project.join("..").join("x"));
    assert_eq!(up.real, root.join("x"));
    assert!(!up.is_inside(roots));
    assert!(Target::of(&project.join("new").join("..").join("y")).is_inside(roots));
    std::fs::write(root.join("outside.txt"), "outside").unwrap();
    std::fs::hard_link(root.join("outside.txt"), project.join("shared.txt")).unwrap();
    let shared = Target::of(&project.join("shared.txt"));
    assert!(matches!(shared.found, Found::File { links: 2, .. }), "{shared:?}");
    assert!(shared.is_inside(roots), "replaced by rename: judged by its name");
    assert!(!shared.clone().written_in_place(true).is_inside(roots), "changed in place: every name changes");
    // A replacement leaves the other name alone.
    shared.write_atomic(b"new").unwrap();
    assert_eq!(std::fs::read_to_string(root.join("outside.txt")).unwrap(), "outside");
}

#[test]
fn searches_open_regular_files_only() {
    let (_dir, root) = root();
    std::fs::write(root.join("f.txt"), "text").unwrap();
    let mut file = open_searchable(&root.join("f.txt")).unwrap();
    let mut text = String::new();
    file.read_to_string(&mut text).unwrap();
    assert_eq!(text, "text");
    assert!(open_searchable(&root).is_err(), "a directory");
    assert!(open_searchable(&root.join("missing")).is_err());
}
