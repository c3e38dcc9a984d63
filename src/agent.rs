//! The turn loop: sample the model, stream what it says to the user, run the
//! tools it asks for, feed the results back, and repeat until it is done.
//!
//! A turn reaches the outside world only through [`EventSink`] (what the user
//! should see) and the cancellation token it is given. It knows nothing of ACP
//! or JSON-RPC: the `acp` module maps [`AgentEvent`]s to `session/update`s and
//! [`StopReason`] to the wire.
//!
//! Cancellation: every await that can wait (opening the stream, each chunk,
//! later each permission answer and tool run) is raced against the turn's
//! token in a `biased` `select!`, so a stalled upstream is interrupted, not
//! waited out. A cancelled turn leaves the conversation valid for the next
//! request: a partial answer is kept and marked as interrupted.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::AgentSettings;
use crate::model::{
    FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelOutput, StreamDecoder, ToolCallRequest, UserPart,
};
use crate::session::Conversation;

/// Something the user should see, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A piece of the answer.
    AgentText {
        /// Identifies the message this piece belongs to.
        message_id: Arc<str>,
        /// The text.
        text: String,
    },
    /// A piece of the model's reasoning.
    AgentThought {
        /// Identifies the thought this piece belongs to.
        message_id: Arc<str>,
        /// The text.
        text: String,
    },
    /// Context-window occupancy after a model request.
    Usage {
        /// Tokens in use.
        used: u64,
        /// The window.
        size: u64,
    },
}

/// Where a turn sends what the user should see. Emitting never blocks.
pub trait EventSink: Send + Sync {
    /// Delivers one event.
    fn emit(&self, event: AgentEvent);
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model finished.
    EndTurn,
    /// The model hit its output-token limit.
    MaxTokens,
    /// The turn used up its model requests.
    MaxTurnRequests,
    /// The model (or the provider's filter) refused.
    Refusal,
    /// The user cancelled.
    Cancelled,
}

/// Why a turn failed.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The model request failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// What one turn needs, borrowed from the session and the server.
pub struct Turn<'a> {
    /// The model to sample.
    pub client: &'a ModelClient,
    /// Turn limits.
    pub settings: &'a AgentSettings,
    /// Where events go.
    pub events: &'a dyn EventSink,
    /// Cancelled when the user cancels (or the session or process ends).
    pub cancel: &'a CancellationToken,
}

enum Sample {
    Done(ModelOutput),
    Cancelled(Option<StreamDecoder>),
    Failed(ModelError, Option<StreamDecoder>),
}

impl Turn<'_> {
    /// Runs one turn for the user's message, appending to `conversation`.
    ///
    /// Takes the initial user input, then loops: each model response either
    /// asks for tools (they run, their results are appended, and the model is
    /// sampled again) or is the final answer (the turn ends). On cancel the
    /// result is `Ok(StopReason::Cancelled)`, never an error.
    pub async fn run(&self, conversation: &mut Conversation, user: Vec<UserPart>) -> Result<StopReason, TurnError> {
        let turn_start = conversation.messages.len();
        conversation.messages.push(Message::User { parts: user });
        let mut requests = 0u32;
        loop {
            if requests >= self.settings.max_model_requests_per_turn {
                return Ok(StopReason::MaxTurnRequests);
            }
            requests += 1;
            let output = match self.sample(conversation).await {
                Sample::Done(output) => output,
                Sample::Cancelled(partial) => {
                    keep_interrupted(conversation, partial);
                    return Ok(StopReason::Cancelled);
                }
                Sample::Failed(error, partial) => {
                    keep_interrupted(conversation, partial);
                    return Err(error.into());
                }
            };
            if let Some(usage) = output.usage {
                self.events.emit(AgentEvent::Usage {
                    used: usage.input_tokens + usage.output_tokens,
                    size: self.client.model().context_window,
                });
            }
            let refused = output.refused || output.finish_reason == FinishReason::ContentFilter;
            let finish_reason = output.finish_reason.clone();
            let tool_calls = output.tool_calls.clone();
            conversation.messages.push(Message::Assistant {
                text: output.text,
                reasoning: output.reasoning,
                tool_calls: output.tool_calls,
                interrupted: false,
            });
            if refused {
                // ACP: after a refusal the prompt and everything after it are
                // left out of the next request.
                conversation.messages.truncate(turn_start);
                return Ok(StopReason::Refusal);
            }
            if finish_reason == FinishReason::Length {
                answer_unrun_calls(conversation, &tool_calls, "not run: the response hit the output-token limit");
                return Ok(StopReason::MaxTokens);
            }
            if tool_calls.is_empty() {
                return Ok(StopReason::EndTurn);
            }
            self.run_tools(conversation, &tool_calls);
        }
    }

    /// Runs the tools the model asked for and appends their results.
    fn run_tools(&self, conversation: &mut Conversation, calls: &[ToolCallRequest]) {
        for call in calls {
            conversation.messages.push(Message::Tool {
                tool_call_id: call.id.clone(),
                content: format!("Error: there is no tool named \"{}\".", call.name),
            });
        }
    }

    /// One model request, streamed to the user as it arrives.
    async fn sample(&self, conversation: &Conversation) -> Sample {
        let request_id = uuid::Uuid::new_v4().simple().to_string();
        let message_id: Arc<str> = Arc::from(format!("msg_{request_id}"));
        let thought_id: Arc<str> = Arc::from(format!("thought_{request_id}"));
        let opened = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return Sample::Cancelled(None),
            opened = self.client.stream(&conversation.system_prompt, &conversation.messages, &[]) => opened,
        };
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => return Sample::Failed(error, None),
        };
        let mut decoder = StreamDecoder::new(format!("call_{}_", &request_id[..12]));
        let mut forward = |event: ModelEvent| match event {
            ModelEvent::Text(text) => self.events.emit(AgentEvent::AgentText { message_id: message_id.clone(), text }),
            ModelEvent::Reasoning(text) => {
                self.events.emit(AgentEvent::AgentThought { message_id: thought_id.clone(), text })
            }
            ModelEvent::ToolCallStarted { .. } => {}
        };
        loop {
            let item = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Sample::Cancelled(Some(decoder)),
                item = stream.next() => item,
            };
            match item {
                None => return Sample::Done(decoder.finish()),
                Some(Ok(chunk)) => {
                    if let Err(reported) = decoder.push(chunk, &mut forward) {
                        return Sample::Failed(ModelError::Provider(reported.0), Some(decoder));
                    }
                }
                Some(Err(error)) => return Sample::Failed(error, Some(decoder)),
            }
        }
    }
}

/// Keeps what the user already saw of an answer that did not finish, marked
/// as interrupted. Tool calls of an unfinished answer never ran and are
/// dropped. The marker message is kept even when empty so that user and
/// assistant messages keep alternating (some chat templates insist).
fn keep_interrupted(conversation: &mut Conversation, partial: Option<StreamDecoder>) {
    let (text, reasoning) = match partial {
        Some(decoder) => {
            let output = decoder.finish();
            (output.text, output.reasoning)
        }
        None => (String::new(), String::new()),
    };
    conversation.messages.push(Message::Assistant { text, reasoning, tool_calls: Vec::new(), interrupted: true });
}

/// Gives every call a result so that the next request is valid (each
/// `tool_calls` entry must be answered).
fn answer_unrun_calls(conversation: &mut Conversation, calls: &[ToolCallRequest], why: &str) {
    for call in calls {
        conversation.messages.push(Message::Tool { tool_call_id: call.id.clone(), content: why.to_owned() });
    }
}
