//! Shared presentation: what both front ends (`acp` for editors, `term` for
//! a terminal) show and record the same way, so neither imports the other.
//!
//! - [`text`]: text from the model, the workspace or a server made safe to
//!   show (no escape sequence, control or invisible character gets through).
//! - [`record`]: agent events in the journal's shape (ACP `session/update`s,
//!   by design: see there), and the ACP shapes of how a turn ended, which
//!   `lathe exec --json` prints on purpose.
//! - [`replay`]: a stored session read back: what the user saw, and the
//!   transcript the model continues from.

pub mod record;
pub mod replay;
pub mod text;
