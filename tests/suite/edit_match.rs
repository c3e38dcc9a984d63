//! Issue 31: the edit matcher's properties on random inputs, the same checks
//! as the fuzz target `edit_match` (see `tests/support/edit_match.rs`): a
//! recovered edit writes exactly what the model meant, the reverse edit
//! with the same mistake gives the original file back, and a refusal
//! changes nothing.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::support::edit_match::check;

#[allow(dead_code)]
#[path = "../../benches/edit_match/cases.rs"]
mod bench_cases;

/// The benchmark's cases (`cargo bench --bench edit_match`) each land at
/// the level they measure, so the benchmark cannot measure something else.
#[test]
fn every_benchmark_case_lands_where_it_should() {
    for case in bench_cases::all() {
        let outcome = lathe::tools::edit_match::locate(&case.file, &case.old, &case.new, false);
        assert!((case.expect)(&outcome), "{}: {outcome:?}", case.name);
    }
}

#[test]
fn recovered_edits_are_exact_and_reversible_on_random_files() {
    // A fixed seed: the suite is deterministic; the fuzz target `edit_match`
    // is where new inputs are searched for.
    let mut runner = TestRunner::new_with_rng(
        Config { cases: 4000, ..Config::default() },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let input = (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..160))
        .prop_map(|(mode, rest)| std::iter::once(mode & !1).chain(rest).collect::<Vec<u8>>());
    runner
        .run(&input, |data| {
            check(&data);
            Ok(())
        })
        .unwrap();
}

#[test]
fn arbitrary_strings_never_panic_the_matcher() {
    let mut runner = TestRunner::new_with_rng(
        Config { cases: 2000, ..Config::default() },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let text = "[ \t\r\n\\\\ntabxyz=(){}'\"\u{2019}\u{201c}\u{2014}\u{a0}0-9]{0,60}";
    runner
        .run(&(text, text, text), |(file, old, new)| {
            let mut data = vec![1u8];
            for (index, part) in [file, old, new].iter().enumerate() {
                if index > 0 {
                    data.push(0xFF);
                }
                data.extend_from_slice(part.as_bytes());
            }
            check(&data);
            Ok(())
        })
        .unwrap();
}
