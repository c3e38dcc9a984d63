//! What lathe already did, said the standard way (issue 30 item 6), each
//! only to a client that asks for it where a capability exists: the tool's
//! `name` on every tool call; `usage_update.cost` from the server's figure
//! or the configured prices; compaction as `compaction_update` /
//! `compaction_summary_chunk` (`session.compaction`), also in replay; the
//! client's `systemPrompt`, appended or replacing lathe's instructions;
//! one-time warnings as `notice`s (`session.notices`). A client without
//! these capabilities gets what it got before (`transcript` checks it byte
//! for byte).

use serde_json::{Value, json};

use crate::support::acp_client::{initialize, prompt, updates_of_kind};
use crate::support::harness::Harness;
use crate::support::mock_openai::{Reply, Step, ev_finish, ev_role, ev_text, text_reply, tool_call_reply};

/// A text answer whose usage chunk carries a cost, as OpenRouter sends it.
fn costed_reply(text: &str, cost: f64) -> Reply {
    Reply::Sse(vec![
        ev_role(),
        ev_text(text),
        ev_finish("stop"),
        Step::Event(json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10, "cost": cost}})),
        Step::Done,
    ])
}

async fn turn(h: &mut Harness, session: &str, text: &str) -> Vec<Value> {
    let id = prompt(&mut h.agent, session, text).await;
    let (seen, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    seen
}

#[tokio::test]
async fn every_tool_call_names_its_tool() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[(
        "call_p",
        "update_plan",
        json!({"plan": [{"content": "a", "status": "pending"}]}),
    )]));
    h.mock.push(text_reply("ok"));
    let seen = turn(&mut h, &session, "plan").await;
    let calls = updates_of_kind(&seen, "tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["name"], "update_plan");
}

#[tokio::test]
async fn the_cost_is_the_servers_or_the_configured_prices_summed_over_the_session() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(costed_reply("one", 0.002));
    h.mock.push(costed_reply("two", 0.003));
    let seen = turn(&mut h, &session, "first").await;
    assert_eq!(updates_of_kind(&seen, "usage_update")[0]["cost"], json!({"amount": 0.002, "currency": "USD"}));
    let seen = turn(&mut h, &session, "second").await;
    let cost = &updates_of_kind(&seen, "usage_update")[0]["cost"];
    assert!((cost["amount"].as_f64().unwrap() - 0.005).abs() < 1e-12, "the session's cost so far: {cost}");

    // Loaded again, the session's cost goes on from where it was.
    h.restart().await;
    initialize(&mut h.agent, json!({})).await;
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    let (replay, _) = h.agent.response(id).await;
    let replayed = updates_of_kind(&replay, "usage_update");
    assert!((replayed[0]["cost"]["amount"].as_f64().unwrap() - 0.005).abs() < 1e-12, "{replayed:?}");
    h.mock.push(costed_reply("three", 0.001));
    let seen = turn(&mut h, &session, "third").await;
    let cost = updates_of_kind(&seen, "usage_update")[0]["cost"]["amount"].as_f64().unwrap();
    assert!((cost - 0.006).abs() < 1e-12, "{cost}");

    // No cost from the server: the configured prices (100 prompt and 10
    // generated tokens at $3 and $15 a million); none configured, no cost.
    let mut h = Harness::with_config("price_input_per_mtok = 3.0\nprice_output_per_mtok = 15.0\n").await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_text("priced"),
        ev_finish("stop"),
        Step::Event(json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10}})),
        Step::Done,
    ]));
    let seen = turn(&mut h, &session, "price it").await;
    let cost = updates_of_kind(&seen, "usage_update")[0]["cost"]["amount"].as_f64().unwrap();
    assert!((cost - 0.00045).abs() < 1e-12, "{cost}");
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(text_reply("free"));
    let seen = turn(&mut h, &session, "no price").await;
    assert!(updates_of_kind(&seen, "usage_update")[0].get("cost").is_none());
}

/// `/compact` to a client that shows compactions: `compaction_update`s and
/// the summary as it is written, no thought line; the completed update is
/// history (replayed), and a client without the capability is replayed the
/// thought line it would have been sent.
#[tokio::test]
async fn compaction_is_shown_as_compaction_updates_to_a_client_that_offers_them() {
    let mut h = Harness::start().await;
    let compaction = json!({"session": {"compaction": {}}});
    let session = h.session_with(compaction.clone()).await;
    h.mock.push(text_reply("An answer."));
    turn(&mut h, &session, "a question").await;
    h.mock.push(text_reply("SUMMARY: a question, an answer."));
    let seen = turn(&mut h, &session, "/compact").await;
    assert!(updates_of_kind(&seen, "agent_thought_chunk").is_empty(), "{seen:?}");
    let updates = updates_of_kind(&seen, "compaction_update");
    assert_eq!(updates.len(), 2, "{seen:?}");
    let id = updates[0]["compactionId"].clone();
    assert_eq!(updates[0]["status"], "in_progress");
    assert_eq!(updates[1]["compactionId"], id);
    assert_eq!(updates[1]["status"], "completed");
    assert_eq!(updates[1]["summary"], json!([{"type": "text", "text": "SUMMARY: a question, an answer."}]));
    let chunks: String = updates_of_kind(&seen, "compaction_summary_chunk")
        .iter()
        .map(|u| {
            assert_eq!(u["compactionId"], id);
            u["content"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(chunks, "SUMMARY: a question, an answer.");

    for (capabilities, shown_as) in [(compaction, "compaction_update"), (json!({}), "agent_thought_chunk")] {
        h.restart().await;
        initialize(&mut h.agent, capabilities).await;
        let id =
            h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
        let (replay, _) = h.agent.response(id).await;
        let replayed = updates_of_kind(&replay, shown_as);
        assert_eq!(replayed.len(), 1, "{replay:?}");
        let other = if shown_as == "compaction_update" { "agent_thought_chunk" } else { "compaction_update" };
        assert!(updates_of_kind(&replay, other).is_empty(), "{replay:?}");
        if shown_as == "agent_thought_chunk" {
            assert!(
                replayed[0]["content"]["text"].as_str().unwrap().starts_with("Summarising the earlier conversation")
            );
        }
    }

    // A client without the capability gets the thought line live, as before.
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(text_reply("An answer."));
    turn(&mut h, &session, "a question").await;
    h.mock.push(text_reply("SUMMARY"));
    let seen = turn(&mut h, &session, "/compact").await;
    assert!(updates_of_kind(&seen, "compaction_update").is_empty());
    let thought = updates_of_kind(&seen, "agent_thought_chunk");
    assert!(thought[0]["content"]["text"].as_str().unwrap().starts_with("Summarising the earlier conversation"));
}

/// lathe advertises both modes; the client's text follows lathe's prompt
/// (append) or takes the place of lathe's instructions (override), and is
/// the same in every request; what lathe cannot apply fails the request.
#[tokio::test]
async fn the_clients_system_prompt_is_appended_or_replaces_lathes_instructions() {
    let mut h = Harness::start().await;
    let result = initialize(&mut h.agent, json!({})).await;
    assert_eq!(
        result["agentCapabilities"]["sessionCapabilities"]["systemPrompt"],
        json!({"mode": {"override": {}}}),
        "{result}"
    );
    let project = h.project.clone();
    let new = |mode: &str, content: Value| json!({"cwd": project, "mcpServers": [], "systemPrompt": {"mode": mode, "content": content}});
    let text = json!([{"type": "text", "text": "Always answer in French."}]);
    let requests = [new("append", text.clone()), new("override", text.clone())];
    let bad = [
        new("replace", text.clone()),
        new("append", json!([{"type": "image", "data": "aGk=", "mimeType": "image/png"}])),
        new("append", json!([])),
    ];
    for (n, params) in requests.into_iter().enumerate() {
        let id = h.agent.request("session/new", params).await;
        let (_, response) = h.agent.response(id).await;
        let session = response["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned();
        h.agent.until("the commands", |m| m["params"]["update"]["sessionUpdate"] == "available_commands_update").await;
        h.mock.push(text_reply("Oui."));
        h.mock.push(text_reply("Encore oui."));
        turn(&mut h, &session, "hello").await;
        turn(&mut h, &session, "again").await;
        let requests = h.mock.chat_requests();
        let (first, second) = (&requests[requests.len() - 2], &requests[requests.len() - 1]);
        assert_eq!(first.body["messages"][0], second.body["messages"][0], "byte-stable across turns");
        let system = first.body["messages"][0]["content"].as_str().unwrap();
        if n == 0 {
            assert!(
                system.starts_with("You are lathe") && system.ends_with("\n\nAlways answer in French."),
                "{system}"
            );
        } else {
            assert!(system.starts_with("Always answer in French.\n"), "{system}");
            assert!(!system.contains("You are lathe") && system.contains("Working directory"), "{system}");
        }
    }
    for params in bad {
        let id = h.agent.request("session/new", params).await;
        let (_, response) = h.agent.response(id).await;
        assert_eq!(response["error"]["code"], -32602, "{response}");
    }
}

/// An MCP server that cannot start is a `notice` to a client that shows
/// them (not history: not replayed), and the agent message it was before
/// to one that does not.
#[tokio::test]
async fn a_failed_mcp_server_is_a_notice_to_a_client_that_shows_them() {
    let broken = "[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n";
    for notices in [true, false] {
        let mut h = Harness::with_config(&format!("\n{broken}")).await;
        let capabilities = if notices { json!({"session": {"notices": {}}}) } else { json!({}) };
        let session = h.session_with(capabilities).await;
        h.mock.push(text_reply("Fine."));
        let seen = turn(&mut h, &session, "hi").await;
        let notices_sent = updates_of_kind(&seen, "notice");
        let said: String = updates_of_kind(&seen, "agent_message_chunk")
            .iter()
            .filter_map(|u| u["content"]["text"].as_str())
            .collect();
        if notices {
            assert_eq!(notices_sent.len(), 1, "{seen:?}");
            assert_eq!(notices_sent[0]["severity"], "warning");
            assert_eq!(notices_sent[0]["title"], "An MCP server is unavailable");
            assert!(notices_sent[0]["description"].as_str().unwrap().contains("MCP server `broken` is unavailable"));
            assert_eq!(said, "Fine.");
        } else {
            assert!(notices_sent.is_empty());
            assert!(said.contains("MCP server `broken` is unavailable") && said.ends_with("Fine."), "{said}");
        }
    }
}
