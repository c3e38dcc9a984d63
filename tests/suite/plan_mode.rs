//! Plan mode (issue 30 item 3): in `plan` the model reads, searches and
//! fetches; a write is refused without a question; `exit_plan_mode` shows
//! the plan (`plan_update` to a client that offers `plan`, the legacy `plan`
//! entries otherwise) and asks "run this plan?"; approving it switches the
//! mode (`current_mode_update`) and the turn goes on. `exit_plan_mode` is
//! offered from the first request in plan mode on, and then kept, so the
//! requests after the approval keep the prefix. (`exec --mode plan` and
//! `/plan` are in `term_exec` and `term_chat`.)

use serde_json::{Value, json};

use crate::support::acp_client::{Answer, final_status, prompt, updates_of_kind};
use crate::support::harness::Harness;
use crate::support::mock_openai::{RecordedRequest, text_reply, tool_call_reply, tool_result};

const PLAN: &str = "# Plan\n\n1. Write `notes.txt`\n2. [x] Read the project\n- Check it\n";

fn tool_names(request: &RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn set_mode(h: &mut Harness, session: &str, mode: &str) {
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
}

#[tokio::test]
async fn a_write_is_refused_then_the_approved_plan_runs_in_the_same_turn() {
    let mut h = Harness::start().await;
    let session = h.session_with(json!({"plan": {}})).await;
    // Before plan mode, exit_plan_mode is not offered.
    h.mock.push(text_reply("Hello."));
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.agent.response(id).await;
    assert!(!tool_names(&h.mock.chat_requests()[0]).contains(&"exit_plan_mode".to_owned()));

    set_mode(&mut h, &session, "plan").await;
    let write = json!({"path": "notes.txt", "content": "planned\n"});
    h.mock.push(tool_call_reply(&[("call_w1", "write_file", write.clone())]));
    h.mock.push(tool_call_reply(&[("call_x", "exit_plan_mode", json!({"plan": PLAN}))]));
    h.mock.push(tool_call_reply(&[("call_w2", "write_file", write)]));
    h.mock.push(text_reply("Done."));
    let id = prompt(&mut h.agent, &session, "write the notes").await;
    let mut asked = Vec::new();
    let (seen, response) = h
        .agent
        .response_answering(id, |request| {
            asked.push(request.clone());
            Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": "run_accept-edits"}}))
        })
        .await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    // One question in the whole turn: the plan's. Neither write asked.
    assert_eq!(asked.len(), 1, "{asked:?}");
    let params = &asked[0]["params"];
    assert_eq!(asked[0]["method"], "session/request_permission");
    assert_eq!(params["toolCall"]["toolCallId"], "call_x");
    assert_eq!(params["toolCall"]["title"], "Run this plan?");
    assert_eq!(params["toolCall"]["content"][0]["content"]["text"], PLAN);
    assert_eq!(
        params["options"],
        json!([
            {"optionId": "run_ask", "name": "Yes, and ask before each change", "kind": "allow_once"},
            {"optionId": "run_accept-edits", "name": "Yes, and accept edits", "kind": "allow_once"},
            {"optionId": "run_auto", "name": "Yes, in auto mode", "kind": "allow_once"},
            {"optionId": "keep_planning", "name": "No, keep planning", "kind": "reject_once"},
        ])
    );

    let requests = h.mock.chat_requests();
    assert_eq!(requests.len(), 5, "four requests in the planning turn");
    let refused = tool_result(&requests[2].body, "call_w1");
    assert!(refused.contains("plan mode"), "{refused}");
    assert_eq!(final_status(&seen, "call_w1"), "failed");
    let approved = tool_result(&requests[3].body, "call_x");
    assert!(approved.contains("accept-edits mode"), "{approved}");
    assert_eq!(std::fs::read_to_string(h.project.join("notes.txt")).unwrap(), "planned\n");
    assert_eq!(final_status(&seen, "call_w2"), "completed");

    // The prompt told the model it plans; the prefix (system prompt and
    // tools, exit_plan_mode last) is the same in every request of the turn,
    // before and after the approval.
    let first = &requests[1].body;
    let user = first["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
    assert!(user.contains("Plan mode") && user.contains("exit_plan_mode"), "{user}");
    assert_eq!(tool_names(&requests[1]).last().map(String::as_str), Some("exit_plan_mode"));
    for request in &requests[2..] {
        assert_eq!(request.body["tools"], first["tools"], "the tools stay as they were");
        assert_eq!(request.body["messages"][0], first["messages"][0], "the system prompt too");
    }

    // The client saw the plan as Markdown, then the mode switch.
    let plans = updates_of_kind(&seen, "plan_update");
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0]["plan"], json!({"type": "markdown", "planId": "plan", "content": PLAN}));
    assert!(updates_of_kind(&seen, "plan").is_empty(), "no legacy plan for a client that shows plan_update");
    let modes = updates_of_kind(&seen, "current_mode_update");
    assert_eq!(modes.len(), 1);
    assert_eq!(modes[0]["currentModeId"], "accept-edits");
    let options = updates_of_kind(&seen, "config_option_update");
    let mode = options[0]["configOptions"].as_array().unwrap().iter().find(|o| o["id"] == "mode").unwrap();
    assert_eq!(mode["currentValue"], "accept-edits");
    let tool_call = updates_of_kind(&seen, "tool_call").into_iter().find(|u| u["toolCallId"] == "call_x").unwrap();
    assert_eq!(tool_call["name"], "exit_plan_mode");
}

/// A client without `plan` gets the plan as legacy entries; "keep
/// planning" leaves the session in plan mode, and the model hears it.
#[tokio::test]
async fn keep_planning_stays_in_plan_mode_and_a_plain_client_gets_entries() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    set_mode(&mut h, &session, "plan").await;
    h.mock.push(tool_call_reply(&[("call_x", "exit_plan_mode", json!({"plan": PLAN}))]));
    h.mock.push(text_reply("What should change?"));
    let id = prompt(&mut h.agent, &session, "plan it").await;
    let (seen, response) = h
        .agent
        .response_answering(id, |_| {
            Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": "keep_planning"}}))
        })
        .await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(updates_of_kind(&seen, "plan_update").is_empty());
    let plans = updates_of_kind(&seen, "plan");
    assert_eq!(plans.len(), 1);
    let entries: Vec<(Value, Value)> =
        plans[0]["entries"].as_array().unwrap().iter().map(|e| (e["content"].clone(), e["status"].clone())).collect();
    assert_eq!(
        entries,
        [
            (json!("Write `notes.txt`"), json!("pending")),
            (json!("Read the project"), json!("completed")),
            (json!("Check it"), json!("pending")),
        ]
    );
    assert!(updates_of_kind(&seen, "current_mode_update").is_empty());
    let told = tool_result(&h.mock.chat_requests()[1].body, "call_x");
    assert!(told.contains("keep planning"), "{told}");
    // Still planning: a write is refused without a question.
    h.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "a.txt", "content": "x"}))]));
    h.mock.push(text_reply("Refused."));
    let id = prompt(&mut h.agent, &session, "write it anyway").await;
    let (seen, _) = h.agent.response(id).await;
    assert!(!seen.iter().any(|m| m["method"] == "session/request_permission"));
    assert!(!h.project.join("a.txt").exists());
}
