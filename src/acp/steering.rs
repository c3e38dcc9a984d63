//! `_session/steering`: a message for the running turn, the de-facto
//! extension codex-acp and claude-agent-acp answer (advertised in the
//! `initialize` result's `_meta.steering.supported`). Request
//! `{"sessionId", "prompt": [ContentBlock...], "_meta"?: {"steering":
//! {"idleBehavior": "promptRequired"}}}`; the answer's `outcome`:
//!
//! - `injected`: a turn runs (or waits); the message is read before its
//!   next model request, never in the middle of a tool call, and shown as
//!   the user's (`user_message_chunk`). A turn that ends before reading it
//!   (the model finished as it came) starts another with it, unless the
//!   turn was cancelled: then it joins the next prompt. Waiting messages
//!   are journaled, so none is lost when the session is loaded again.
//! - `startedNewTurn`: no turn ran, so the message started one (answered
//!   once it runs; its updates stream with no `session/prompt` to answer).
//! - `promptRequired` (`"reason": "noRunningTurn"`): no turn ran and the
//!   client asked, with `idleBehavior: "promptRequired"`, to send an
//!   ordinary `session/prompt` itself instead.
//!
//! Messages for one session are handled in arrival order (the reader
//! dispatches inline). An unknown session is `-32002`; an image for a model
//! without vision, or a session cancelled before the turn a message started
//! could run, is `-32600`.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{ContentBlock, SessionId};
use serde::Deserialize;
use serde_json::{Value, json};

use super::turns::Origin;
use super::{INVALID_PARAMS, INVALID_REQUEST, RequestId, RpcError, Server, parse_params};
use crate::session::Steered;

/// The extension method's name.
pub const METHOD: &str = "_session/steering";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SteerRequest {
    session_id: SessionId,
    prompt: Vec<ContentBlock>,
    #[serde(rename = "_meta", default)]
    meta: Option<Value>,
}

impl Server {
    pub(super) fn steer(self: &Arc<Self>, id: RequestId, params: Value) {
        let parsed = (|| {
            let request: SteerRequest = parse_params(params)?;
            let session = self.session(&request.session_id)?;
            if request.prompt.is_empty() {
                return Err(RpcError::new(INVALID_PARAMS, "Invalid params: prompt: the message is empty"));
            }
            let images = request.prompt.iter().any(|block| matches!(block, ContentBlock::Image(_)));
            let parts = self.user_parts(&session, request.prompt).map_err(|error| match images {
                // codex-acp's answer to an image for a text-only model.
                true => RpcError::new(INVALID_REQUEST, "The current model does not support image input"),
                false => error,
            })?;
            let prompt_required =
                request.meta.as_ref().and_then(|meta| meta.pointer("/steering/idleBehavior")).and_then(Value::as_str)
                    == Some("promptRequired");
            Ok::<_, RpcError>((session, parts, prompt_required))
        })();
        let (session, parts, prompt_required) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.outbox.respond_err(&id, &error),
        };
        let parts = match session.steer(parts) {
            Steered::Queued => return self.outbox.respond_ok(&id, &json!({ "outcome": "injected" })),
            Steered::Idle(_) if prompt_required => {
                return self.outbox.respond_ok(&id, &json!({ "outcome": "promptRequired", "reason": "noRunningTurn" }));
            }
            Steered::Idle(parts) => parts,
        };
        let queued = session.enqueue_turn();
        let (started, running) = tokio::sync::oneshot::channel();
        self.spawn_turn(Arc::clone(&session), queued, parts, Origin::Steer, Some(started));
        let outbox = self.outbox.clone();
        self.tasks.spawn(async move {
            match running.await {
                Ok(true) => outbox.respond_ok(&id, &json!({ "outcome": "startedNewTurn" })),
                Ok(false) | Err(_) => outbox.respond_err(
                    &id,
                    &RpcError::new(
                        INVALID_REQUEST,
                        format!("Session {} was cancelled before the steering turn started", session.id()),
                    ),
                ),
            }
        });
    }
}
