//! The integration tests' support that unit tests share (`cfg(test)` only):
//! the tests' time ([`clock`]: real-time bounds, a frozen virtual clock) and
//! the mock model server ([`mock_openai`]: real HTTP and SSE over loopback).
//! One copy of each, in tests/support, used from both sides.

// Each unit test module uses part of it.
#![allow(dead_code)]

#[path = "../tests/support/clock.rs"]
pub mod clock;
#[path = "../tests/support/mock_openai.rs"]
pub mod mock_openai;
