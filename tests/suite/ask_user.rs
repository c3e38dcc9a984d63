//! `ask_user` (issue 30 item 2): the model's question reaches the user as
//! an elicitation form when the client offers `elicitation.form`, else as a
//! `session/request_permission` whose options are the choices; the answer
//! is the tool's result; a cancel while the question is open ends the turn
//! at once, and the question is withdrawn. (Its absence in `exec` without a
//! terminal is in `term_exec`.)
//!
//! The official SDK client cannot drive this: the newest SDK on crates.io
//! (5.2.0) is built on schema 1.17.0 (see `official_client`), so the
//! scripted client checks the wire shapes itself.

use serde_json::{Value, json};

use crate::support::acp_client::{Agent, Answer, final_status, prompt};
use crate::support::clock::FrozenClock;
use crate::support::harness::Harness;
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

fn question(free_text: bool) -> Value {
    json!({"question": "Which database?", "choices": ["Postgres", "MySQL"], "free_text": free_text})
}

/// Runs a turn whose model asks once; the client answers the agent's
/// requests with `answer`. Returns the requests it got and what the model
/// was told.
async fn ask(h: &mut Harness, session: &str, args: Value, answer: impl Fn(&Value) -> Answer) -> (Vec<Value>, String) {
    // Each call its own id (lathe keeps them unique in a session anyway).
    let call = format!("call_q{}", h.mock.chat_requests().len());
    h.mock.push(tool_call_reply(&[(&call, "ask_user", args)]));
    h.mock.push(text_reply("Noted."));
    let id = prompt(&mut h.agent, session, "set up the database").await;
    let mut asked = Vec::new();
    let (before, response) = h
        .agent
        .response_answering(id, |request| {
            asked.push(request.clone());
            answer(request)
        })
        .await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let answered = if asked.is_empty() { "failed" } else { "completed" };
    assert_eq!(final_status(&before, &call), answered);
    if let Some(question) = asked.first() {
        let id = question["params"]["toolCall"]["toolCallId"].as_str().or(question["params"]["toolCallId"].as_str());
        assert_eq!(id, Some(call.as_str()), "the question names its call");
    }
    let requests = h.mock.chat_requests();
    (asked, tool_result(&requests[requests.len() - 1].body, &call))
}

#[tokio::test]
async fn a_client_with_forms_gets_an_elicitation_and_the_answer_is_the_result() {
    let mut h = Harness::start().await;
    let session = h.session_with(json!({"elicitation": {"form": {}}})).await;

    let (asked, told) = ask(&mut h, &session, question(false), |_| {
        Answer::Result(json!({"action": "accept", "content": {"choice": "choice_2"}}))
    })
    .await;
    assert_eq!(asked.len(), 1, "one question: {asked:?}");
    assert_eq!(asked[0]["method"], "elicitation/create");
    let params = &asked[0]["params"];
    assert_eq!(params["mode"], "form");
    assert_eq!(params["sessionId"], session.as_str());
    assert_eq!(params["message"], "Which database?");
    let schema = &params["requestedSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(
        schema["properties"]["choice"]["oneOf"],
        json!([{"const": "choice_1", "title": "Postgres"}, {"const": "choice_2", "title": "MySQL"}])
    );
    assert_eq!(schema["required"], json!(["choice"]), "without free text a choice is needed");
    assert!(schema["properties"].get("answer").is_none(), "{schema}");
    assert_eq!(told, "The user chose: MySQL");

    // With free text the form has a text field too, and nothing is required.
    let (asked, told) = ask(&mut h, &session, question(true), |_| {
        Answer::Result(json!({"action": "accept", "content": {"answer": "SQLite, please"}}))
    })
    .await;
    let schema = &asked[0]["params"]["requestedSchema"];
    assert_eq!(schema["properties"]["answer"]["type"], "string", "{schema}");
    assert!(schema.get("required").is_none(), "{schema}");
    assert_eq!(told, "The user answered: SQLite, please");

    // A dismissed form is no answer; the turn goes on.
    let (_, told) = ask(&mut h, &session, question(true), |_| Answer::Result(json!({"action": "decline"}))).await;
    assert_eq!(told, "The user declined to answer.");
}

#[tokio::test]
async fn without_forms_the_choices_are_permission_options() {
    let mut h = Harness::start().await;
    let session = h.session().await;

    let (asked, told) = ask(&mut h, &session, question(true), |request| {
        Answer::Result(
            json!({"outcome": {"outcome": "selected", "optionId": request["params"]["options"][0]["optionId"]}}),
        )
    })
    .await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["method"], "session/request_permission");
    let params = &asked[0]["params"];
    assert_eq!(
        params["options"],
        json!([
            {"optionId": "choice_1", "name": "Postgres", "kind": "allow_once"},
            {"optionId": "choice_2", "name": "MySQL", "kind": "allow_once"},
        ])
    );
    assert_eq!(params["toolCall"]["title"], "Ask: Which database?");
    assert_eq!(params["toolCall"]["content"][0]["content"]["text"], "Which database?");
    assert_eq!(told, "The user chose: Postgres");

    // The model was told, in the tool's description, that a typed answer
    // may be impossible.
    let tools = &h.mock.chat_requests()[0].body["tools"];
    let ask_user = tools.as_array().unwrap().iter().find(|t| t["function"]["name"] == "ask_user").unwrap();
    let description = ask_user["function"]["description"].as_str().unwrap();
    assert!(description.contains("some editors can only show choices"), "{description}");

    // A question without choices cannot be asked this way: the model hears why.
    let (asked, told) = ask(&mut h, &session, json!({"question": "Anything else?"}), |_| Answer::Ignore).await;
    assert!(asked.is_empty(), "{asked:?}");
    assert!(told.contains("can only show choices"), "{told}");
}

/// Cancelled while the question is open (as a form, and as a permission):
/// the prompt answers `cancelled` without waiting out any timer, the
/// question is withdrawn with `$/cancel_request`, the call ends cancelled,
/// and the next prompt goes on from a valid history.
#[tokio::test(start_paused = true)]
async fn a_cancel_ends_the_wait_for_an_answer() {
    for capabilities in [json!({"elicitation": {"form": {}}}), json!({})] {
        let clock = FrozenClock::hold().await;
        let mut h = Harness::start().await;
        let session = h.session_with(capabilities.clone()).await;
        h.mock.push(tool_call_reply(&[("call_q", "ask_user", question(false))]));
        h.mock.push(text_reply("Fine."));
        let id = prompt(&mut h.agent, &session, "set up the database").await;
        let (_, asked) = h.agent.until("the question", |m| m.get("id").is_some() && m.get("method").is_some()).await;
        h.agent.notify("session/cancel", json!({"sessionId": session})).await;
        let (after, response) = h.agent.response(id).await;
        assert_eq!(clock.elapsed(), std::time::Duration::ZERO, "answered without waiting out a timer");
        assert_eq!(response["result"]["stopReason"], "cancelled", "{capabilities}: {response}");
        let withdrawn =
            after.iter().any(|m| m["method"] == "$/cancel_request" && m["params"]["requestId"] == asked["id"]);
        assert!(withdrawn, "{capabilities}: the question is withdrawn: {after:?}");
        assert_eq!(final_status(&after, "call_q"), "failed");
        next_prompt_goes_on(&mut h.agent, &h.mock, &session).await;
        drop(clock);
    }
}

async fn next_prompt_goes_on(agent: &mut Agent, mock: &crate::support::mock_openai::MockOpenAi, session: &str) {
    let id = prompt(agent, session, "go on").await;
    let (_, response) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = mock.chat_requests();
    let told = tool_result(&requests[requests.len() - 1].body, "call_q");
    assert!(told.contains("Cancelled"), "{told}");
}
