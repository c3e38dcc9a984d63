//! What the editor can switch for a session, in ACP's two shapes: the session
//! modes (`modes`, `session/set_mode`, `current_mode_update`) and the config
//! options (`configOptions`, `session/set_config_option`,
//! `config_option_update`). Both describe the same state and are kept in sync.

use agent_client_protocol_schema::v1::{
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption, SessionMode, SessionModeId,
    SessionModeState,
};

use crate::permission::Mode;
use crate::session::Session;

/// The id of the mode config option.
pub const MODE_OPTION: &str = "mode";

/// The session's modes, current one first in nothing but its id.
pub fn mode_state(session: &Session) -> SessionModeState {
    let available = Mode::ALL
        .into_iter()
        .map(|mode| SessionMode::new(SessionModeId::new(mode.id()), mode.name()).description(mode.description()))
        .collect();
    SessionModeState::new(SessionModeId::new(session.mode().id()), available)
}

/// The complete list of config options with their current values.
pub fn config_options(session: &Session) -> Vec<SessionConfigOption> {
    let modes: Vec<SessionConfigSelectOption> = Mode::ALL
        .into_iter()
        .map(|mode| SessionConfigSelectOption::new(mode.id(), mode.name()).description(mode.description()))
        .collect();
    vec![
        SessionConfigOption::select(MODE_OPTION, "Mode", session.mode().id(), modes)
            .description("How much lathe may do without asking")
            .category(SessionConfigOptionCategory::Mode),
    ]
}
