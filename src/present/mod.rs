//! Shared presentation: what both front ends (`acp` for editors, `term` for
//! a terminal) show and record the same way, so neither imports the other.
//!
//! - [`text`]: text from the model, the workspace or a server made safe to
//!   show (no escape sequence, control or invisible character gets through).
//! - [`record`]: agent events in the journal's shape (ACP `session/update`s,
//!   by design: see there), and the ACP shapes of how a turn ended, which
//!   `lathe exec --json` prints on purpose.

pub mod record;
pub mod text;
