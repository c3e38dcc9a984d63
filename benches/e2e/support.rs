//! The pieces of the integration tests' support code the benchmark reuses
//! (the client and the mock, with the three modules they lean on), included by path so that the bench crate does not link the rest of
//! `tests/support` (the tests' own fixtures and work in progress). In the test
//! crate `measure.rs` finds the same modules at `crate::support`.

#[path = "../../tests/support/acp_client.rs"]
pub mod acp_client;
#[path = "../../tests/support/agent_env.rs"]
pub mod agent_env;
#[path = "../../tests/support/clock.rs"]
pub mod clock;
#[path = "../../tests/support/logs.rs"]
pub mod logs;
#[path = "../../tests/support/mock_openai.rs"]
pub mod mock_openai;
