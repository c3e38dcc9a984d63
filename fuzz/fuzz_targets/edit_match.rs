//! The edit matcher (`lathe::tools::edit_match`, issue 31): a file, a region
//! of it, the edit a model meant there and that edit with one of the
//! mistakes the matcher recovers (or none), from the input bytes; see
//! `tests/support/edit_match.rs` for the generator, the layout and what is
//! checked (never a panic; exactly the file the model meant; the reverse
//! edit gives the original back; a refusal changes nothing). The normal
//! suite runs the same checks on random inputs (`suite::edit_match`).

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/support/edit_match.rs"]
mod edit_match;

fuzz_target!(|data: &[u8]| edit_match::check(data));
