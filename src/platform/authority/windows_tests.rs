//! The path-boundary table with Windows' spellings: drive letters in either
//! case, a name in another case than on disk, `..`, the verbatim `\\?\`
//! form, `/` for `\`, a junction that leads outside, and 8.3 short names.
//! The real location is the one spelling every form comes to (the on-disk
//! case, long names, `\\?\` only where the plain form means something else),
//! so `is_inside` needs no case folding of its own. What wine cannot make
//! (junctions) is skipped by name; 8.3 names are skipped when the volume
//! gives none.

use std::path::PathBuf;

use super::*;
use crate::platform::testing;

struct Tree {
    _dir: tempfile::TempDir,
    /// The temporary folder, plain (`C:\...`).
    plain: String,
    project: PathBuf,
    outside: PathBuf,
}

/// `<tmp>\proj` (the root, holding `a.txt`) and `<tmp>\outside` (holding
/// `secret.txt`), named in their plain form.
fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(dir.path()).unwrap().to_string_lossy().into_owned();
    let plain = real.strip_prefix(r"\\?\").unwrap_or(&real).to_owned();
    assert!(plain.as_bytes().get(1) == Some(&b':'), "a drive path: {plain}");
    let project = PathBuf::from(format!(r"{plain}\proj"));
    let outside = PathBuf::from(format!(r"{plain}\outside"));
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(project.join("a.txt"), "a").unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    Tree { _dir: dir, plain, project, outside }
}

/// `plain` with its drive letter in lower case.
fn lower_drive(plain: &str) -> String {
    plain[..1].to_ascii_lowercase() + &plain[1..]
}

#[test]
fn the_resolver_table_with_windows_spellings() {
    let t = tree();
    let (plain, p, o) = (&t.plain, &t.project, &t.outside);
    let roots = std::slice::from_ref(p);
    let lower = lower_drive(plain);
    let slashed = plain.replace('\\', "/");
    let cases: Vec<(String, PathBuf, bool)> = vec![
        (format!(r"{plain}\proj\a.txt"), p.join("a.txt"), true),
        (format!(r"{plain}\proj\..\x"), PathBuf::from(format!(r"{plain}\x")), false),
        (format!(r"{lower}\PROJ\a.txt"), p.join("a.txt"), true),
        (format!(r"{lower}\PROJ\New\deeper.txt"), p.join("New").join("deeper.txt"), true),
        (format!(r"\\?\{plain}\proj\a.txt"), p.join("a.txt"), true),
        (format!(r"\\?\{plain}\proj\new.txt"), p.join("new.txt"), true),
        (format!("{slashed}/proj/src/../a.txt"), p.join("a.txt"), true),
        (format!(r"{slashed}/proj\src/x.rs"), p.join("src").join("x.rs"), true),
        (format!(r"{plain}\proj\..\outside\secret.txt"), o.join("secret.txt"), false),
        (format!(r"{plain}\PROJ\..\OUTSIDE\Secret.TXT"), o.join("secret.txt"), false),
        (format!(r"{plain}\proj2\a.txt"), PathBuf::from(format!(r"{plain}\proj2\a.txt")), false),
    ];
    for (asked, real, inside) in &cases {
        let target = Target::of(Path::new(asked));
        assert_eq!(&target.real, real, "{asked}: {target:?}");
        assert_eq!(target.is_inside(roots), *inside, "{asked}: {target:?}");
    }
    // The roots themselves in any of the spellings.
    let file = Target::of(&p.join("a.txt"));
    for root in [format!(r"\\?\{plain}\proj"), format!(r"{lower}\PROJ"), format!("{slashed}/proj/")] {
        assert!(file.is_inside(&[PathBuf::from(&root)]), "inside {root}");
        assert!(!Target::of(&o.join("secret.txt")).is_inside(&[PathBuf::from(&root)]), "outside {root}");
    }
    // A write through another spelling lands on the judged file.
    Target::of(Path::new(&format!(r"{lower}\PROJ\A.TXT"))).write_atomic(b"b").unwrap();
    assert_eq!(std::fs::read(p.join("a.txt")).unwrap(), b"b");
    let names: Vec<_> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "one a.txt and src, nothing beside: {names:?}");
}

#[test]
fn a_junction_is_judged_where_it_leads() {
    let t = tree();
    let (p, o) = (&t.project, &t.outside);
    let roots = std::slice::from_ref(p);
    if !testing::junction(o, &p.join("out")) || !testing::junction(&p.join("src"), &p.join("src_j")) {
        return;
    }
    let out = Target::of(&p.join("out").join("secret.txt"));
    assert_eq!(out.real, o.join("secret.txt"), "{out:?}");
    assert!(!out.is_inside(roots));
    assert!(out.leads_elsewhere(p));
    let new = Target::of(&p.join("out").join("new.txt"));
    assert!(!new.is_inside(roots), "a new file through the junction: {new:?}");
    let back = Target::of(&p.join("src_j").join("lib.rs"));
    assert_eq!(back.real, p.join("src").join("lib.rs"));
    assert!(back.is_inside(roots));
}

#[test]
fn short_names_are_judged_by_the_long_ones() {
    let t = tree();
    let (p, plain) = (&t.project, &t.plain);
    let long_inside = p.join("a_long_folder_name");
    let long_outside = PathBuf::from(format!(r"{plain}\another_long_folder"));
    std::fs::create_dir_all(&long_inside).unwrap();
    std::fs::create_dir_all(&long_outside).unwrap();
    std::fs::write(long_inside.join("f.txt"), "f").unwrap();
    let (Some(short_inside), Some(short_outside)) =
        (testing::short_name(&long_inside), testing::short_name(&long_outside))
    else {
        return;
    };
    let roots = std::slice::from_ref(p);
    let inside = Target::of(&short_inside.join("f.txt"));
    assert_eq!(inside.real, long_inside.join("f.txt"), "{short_inside:?}: {inside:?}");
    assert!(inside.is_inside(roots));
    let outside = Target::of(&short_outside.join("g.txt"));
    assert_eq!(outside.real, long_outside.join("g.txt"), "{short_outside:?}: {outside:?}");
    assert!(!outside.is_inside(roots));
    // A root named by its short name.
    assert!(Target::of(&long_inside.join("f.txt")).is_inside(&[short_inside]));
}

/// A name Windows would not give the file it spells is refused before
/// anything is touched: a device name (`nul.txt` would swallow the write
/// and report success), trailing dots (`.git.` is `.git`), a stream.
#[test]
fn names_windows_would_change_are_refused() {
    let tree = tree();
    std::fs::create_dir_all(tree.project.join(".git").join("hooks")).unwrap();
    for name in [r"nul.txt", r"src\CON", r"aux.rs", r".git.\hooks\pre-commit", r"a.txt:hidden", r"b.txt "] {
        let target = Target::of(&tree.project.join(name));
        assert!(matches!(target.found, Found::Unresolvable(_)), "{name}: {target:?}");
        assert!(matches!(target.write_atomic(b"x"), Err(GuardError::Unresolvable(_))), "{name}");
    }
    assert!(!tree.project.join(".git").join("hooks").join("pre-commit").exists());
    assert_eq!(std::fs::read_to_string(tree.project.join("a.txt")).unwrap(), "a");
    // Names that only look alike are files like any other.
    Target::of(&tree.project.join("null.txt")).write_atomic(b"kept").unwrap();
    assert_eq!(std::fs::read_to_string(tree.project.join("null.txt")).unwrap(), "kept");
}
