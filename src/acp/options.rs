//! What the editor can switch for a session, in ACP's two shapes: the session
//! modes (`modes`, `session/set_mode`, `current_mode_update`) and the config
//! options (`configOptions`, `session/set_config_option`,
//! `config_option_update`): the model, the mode, and the reasoning effort
//! where the model takes one. Both shapes describe the same state and are
//! kept in sync; every option always has a current value.

use agent_client_protocol_schema::v1::{
    ConfigOptionUpdate, CurrentModeUpdate, SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption,
    SessionMode, SessionModeId, SessionModeState, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse,
};
use serde_json::Value;

use super::{INVALID_PARAMS, RpcError, Server, parse_params};
use crate::config::Config;
use crate::permission::Mode;
use crate::session::{Choices, Session};

/// The id of the model option.
pub const MODEL_OPTION: &str = "model";
/// The id of the mode option.
pub const MODE_OPTION: &str = "mode";
/// The id of the reasoning-effort option.
pub const THOUGHT_LEVEL_OPTION: &str = "thought_level";

/// Reasoning efforts offered for a model that takes one.
const THOUGHT_LEVELS: [(&str, &str); 3] =
    [("low", "Low: quicker answers"), ("medium", "Medium"), ("high", "High: more thorough reasoning")];

/// The session's modes.
pub fn mode_state(session: &Session) -> SessionModeState {
    let available = Mode::ALL
        .into_iter()
        .map(|mode| SessionMode::new(SessionModeId::new(mode.id()), mode.name()).description(mode.description()))
        .collect();
    SessionModeState::new(SessionModeId::new(session.mode().id()), available)
}

/// The complete list of config options with their current values, most
/// important first.
pub fn config_options(config: &Config, session: &Session) -> Vec<SessionConfigOption> {
    let choices = session.choices();
    let models: Vec<SessionConfigSelectOption> = config
        .models
        .values()
        .map(|model| {
            SessionConfigSelectOption::new(model.key.clone(), model.display_name.clone()).description(format!(
                "{} at {}",
                model.model,
                crate::redact::url(&model.base_url)
            ))
        })
        .collect();
    let modes: Vec<SessionConfigSelectOption> = Mode::ALL
        .into_iter()
        .map(|mode| SessionConfigSelectOption::new(mode.id(), mode.name()).description(mode.description()))
        .collect();
    let mut options = vec![
        SessionConfigOption::select(MODEL_OPTION, "Model", choices.model_key.clone(), models)
            .description("The model that answers")
            .category(SessionConfigOptionCategory::Model),
        SessionConfigOption::select(MODE_OPTION, "Mode", session.mode().id(), modes)
            .description("How much lathe may do without asking")
            .category(SessionConfigOptionCategory::Mode),
    ];
    if let Some(level) = &choices.thought_level {
        let mut levels: Vec<SessionConfigSelectOption> =
            THOUGHT_LEVELS.iter().map(|(id, name)| SessionConfigSelectOption::new(*id, *name)).collect();
        if !THOUGHT_LEVELS.iter().any(|(id, _)| id == level) {
            levels.push(SessionConfigSelectOption::new(level.clone(), level.clone()));
        }
        options.push(
            SessionConfigOption::select(THOUGHT_LEVEL_OPTION, "Reasoning effort", level.clone(), levels)
                .description("How long the model thinks before answering")
                .category(SessionConfigOptionCategory::ThoughtLevel),
        );
    }
    options
}

/// The choices for a session using model `key`: its configured reasoning
/// effort, if it takes one.
pub fn choices_for(config: &Config, key: &str) -> Choices {
    crate::setup::choices_for(config, key)
}

/// Parses a mode id.
pub fn parse_mode(id: &str) -> Result<Mode, RpcError> {
    crate::setup::parse_mode(id).map_err(|why| RpcError::new(INVALID_PARAMS, format!("Invalid params: {why}")))
}

impl Server {
    pub(super) fn set_mode(&self, params: Value) -> Result<SetSessionModeResponse, RpcError> {
        let request: SetSessionModeRequest = parse_params(params)?;
        let session = self.session(&request.session_id)?;
        let mode = parse_mode(&request.mode_id.0)?;
        self.switch_mode(&session, mode, false);
        Ok(SetSessionModeResponse::new())
    }

    pub(super) fn set_config_option(&self, params: Value) -> Result<SetSessionConfigOptionResponse, RpcError> {
        let request: SetSessionConfigOptionRequest = parse_params(params)?;
        let session = self.session(&request.session_id)?;
        let value = request.value.as_value_id().map(|v| v.0.to_string()).ok_or_else(|| {
            RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: value: option \"{}\" takes a value id", request.config_id.0),
            )
        })?;
        match &*request.config_id.0 {
            MODE_OPTION => {
                let mode = parse_mode(&value)?;
                session.set_mode(mode);
                self.events(&session)
                    .send_unrecorded(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.id())));
            }
            MODEL_OPTION => self.switch_model(&session, &value).map(|_| ())?,
            THOUGHT_LEVEL_OPTION => {
                let mut choices = session.choices();
                if choices.thought_level.is_none() {
                    return Err(RpcError::new(
                        INVALID_PARAMS,
                        format!("Invalid params: the model \"{}\" has no reasoning effort to set", choices.model_key),
                    ));
                }
                choices.thought_level = Some(value);
                session.set_choices(choices);
            }
            other => {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    format!("Invalid params: configId: unknown option \"{other}\""),
                ));
            }
        }
        self.save_meta(&session);
        Ok(SetSessionConfigOptionResponse::new(config_options(&self.config(), &session)))
    }

    /// Switches the mode. `announce_mode` also sends `current_mode_update`
    /// (when the agent itself changed it); the config options are always
    /// re-sent, since the mode is one of them.
    pub(super) fn switch_mode(&self, session: &Session, mode: Mode, announce_mode: bool) {
        session.set_mode(mode);
        let events = self.events(session);
        if announce_mode {
            events.send_unrecorded(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.id())));
        }
        events.send_unrecorded(SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(config_options(
            &self.config(),
            session,
        ))));
        self.save_meta(session);
    }

    /// Switches the model; the reasoning effort follows the new model's.
    /// Returns the model's display name.
    pub(super) fn switch_model(&self, session: &Session, key: &str) -> Result<String, RpcError> {
        let config = self.config();
        let model = config.models.get(key).ok_or_else(|| {
            let known: Vec<&str> = config.models.keys().map(String::as_str).collect();
            RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: unknown model \"{key}\" (configured: {})", known.join(", ")),
            )
        })?;
        session.set_choices(choices_for(&config, key));
        self.save_meta(session);
        Ok(model.display_name.clone())
    }
}
