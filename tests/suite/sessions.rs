//! Sessions that last, through the real binary: persistence across a hard
//! kill, exact replay on `session/load`, list / resume / close / delete,
//! titles, the model and reasoning-effort options, slash commands, project
//! instructions, and compaction. Item numbers refer to `acp/spec-digest.md`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, answer_at, prompt, seen, updates_of_kind};
use crate::support::clock::poll_until;
use crate::support::editor::{FakeEditor, Permission};
use crate::support::harness::Harness;
use crate::support::mock_openai::{Reply, Step, ev_finish, ev_role, ev_text, ev_usage, text_reply, tool_call_reply};

/// Bound on waiting for the disk (a hang detector).
const WAIT: Duration = Duration::from_secs(5);

async fn initialize(h: &mut Harness) -> Value {
    let id = h.agent.request("initialize", json!({"protocolVersion": 1})).await;
    h.agent.response(id).await.1
}

/// Kill the binary mid-turn (SIGKILL: nothing is flushed or closed), start
/// a new one on the same data dir, `session/load`: the replay equals what
/// the client saw before the kill, and the next request to the model carries
/// the whole earlier conversation (item 22).
#[tokio::test]
async fn a_session_survives_a_hard_kill_and_replays_exactly() {
    let mut h = Harness::process("", &[]).await;
    std::fs::write(h.project.join("notes.txt"), "remember this\n").unwrap();
    let session = h.session().await;
    // Turn 1: a tool call and an answer.
    h.mock.push(tool_call_reply(&[("call_1", "read_file", json!({"path": "notes.txt"}))]));
    h.mock.push(Reply::Sse(vec![
        ev_role(),
        ev_text("The notes say "),
        ev_text("remember this."),
        ev_finish("stop"),
        ev_usage(200, 9),
        Step::Done,
    ]));
    let id = prompt(&mut h.agent, &session, "What do my notes say?").await;
    let (turn1, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    // Turn 2: killed while streaming.
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("Partial ans"), Step::Stall]));
    let _id = prompt(&mut h.agent, &session, "And then?").await;
    let mut turn2 = Vec::new();
    while agent_text(&turn2) != "Partial ans" {
        turn2.push(h.agent.next_message(Duration::from_secs(5)).await.expect("the partial answer"));
    }
    // The store's writer thread journals what the client was sent; kill once
    // the partial answer is on disk (a record the kill can no longer undo).
    let log = h.home.path().join(".local/share/lathe/sessions").join(&session).join("log.jsonl");
    poll_until("the partial answer reaches the log", WAIT, || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("Partial ans"))
    })
    .await;
    h.kill_and_restart().await;

    let caps = initialize(&mut h).await;
    assert_eq!(caps["result"]["agentCapabilities"]["loadSession"], true);
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    let (replay, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    assert_eq!(response["result"]["modes"]["currentModeId"], "ask");

    let replayed = seen(&replay);
    let mut expected = vec![
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "What do my notes say?"}}),
    ];
    expected.extend(seen(&turn1));
    expected.push(json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "And then?"}}));
    expected.extend(seen(&turn2));
    assert_eq!(replayed, expected, "the replay is what the user saw");
    assert!(replay.iter().all(|m| m["params"]["sessionId"] == session.as_str()));

    // The conversation goes on with the whole history.
    h.mock.push(text_reply("Continuing."));
    let id = prompt(&mut h.agent, &session, "Go on").await;
    let (after, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&after), "Continuing.");
    let requests = h.mock.requests();
    let request = &requests.last().unwrap().body;
    let roles: Vec<&str> =
        request["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "user"]);
    assert_eq!(request["messages"][1]["content"], "What do my notes say?");
    assert!(request["messages"][3]["content"].as_str().unwrap().contains("remember this"));
    assert_eq!(request["messages"][4]["content"], "The notes say remember this.");
    assert!(request["messages"][6]["content"].as_str().unwrap().starts_with("Partial ans"));
    assert_eq!(request["messages"][7]["content"], "Go on");
}

#[tokio::test]
async fn list_resume_close_delete_and_paging() {
    let mut h = Harness::start().await;
    let first = h.session().await;
    h.mock.push(text_reply("ok"));
    let id = prompt(&mut h.agent, &first, "Refactor the config loader\nplease").await;
    let (before, _) = h.agent.response(id).await;
    // The title comes from the first prompt (a session_info_update).
    let info = updates_of_kind(&before, "session_info_update");
    assert_eq!(info[0]["title"], "Refactor the config loader");
    assert!(info[0]["updatedAt"].as_str().unwrap().ends_with('Z'));

    let other_dir = h.home.path().join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let mut ids = vec![first.clone()];
    for _ in 0..54 {
        let id = h.agent.request("session/new", json!({"cwd": other_dir, "mcpServers": []})).await;
        let (_, response) = h.agent.response(id).await;
        ids.push(response["result"]["sessionId"].as_str().unwrap().to_owned());
    }

    // Filter by cwd.
    let id = h.agent.request("session/list", json!({"cwd": h.project})).await;
    let (_, response) = h.agent.response(id).await;
    let sessions = response["result"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["sessionId"], first.as_str());
    assert_eq!(sessions[0]["title"], "Refactor the config loader");
    assert_eq!(sessions[0]["cwd"], h.project.to_str().unwrap());
    // Paging through everything.
    let mut listed = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let params = if cursor.is_null() { json!({}) } else { json!({"cursor": cursor}) };
        let id = h.agent.request("session/list", params).await;
        let (_, response) = h.agent.response(id).await;
        let page = response["result"]["sessions"].as_array().unwrap();
        assert!(page.len() <= 50);
        listed.extend(page.iter().map(|s| s["sessionId"].as_str().unwrap().to_owned()));
        cursor = response["result"]["nextCursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let mut expected = ids.clone();
    expected.sort();
    listed.sort();
    assert_eq!(listed, expected);
    // A bad cursor is an error; a filter matching nothing is an empty list (item 27).
    let id = h.agent.request("session/list", json!({"cursor": "bogus"})).await;
    assert_eq!(h.agent.response(id).await.1["error"]["code"], -32602);
    let id = h.agent.request("session/list", json!({"cwd": "/nowhere"})).await;
    assert_eq!(h.agent.response(id).await.1["result"]["sessions"], json!([]));

    // Resume: no replay (item 23), and the conversation goes on.
    h.restart().await;
    initialize(&mut h).await;
    let id = h.agent.request("session/resume", json!({"sessionId": first, "cwd": h.project})).await;
    let (before, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    assert!(before.is_empty(), "resume replays nothing: {before:?}");
    h.mock.push(text_reply("resumed"));
    let id = prompt(&mut h.agent, &first, "next").await;
    let (after, _) = h.agent.response(id).await;
    assert_eq!(agent_text(&after), "resumed");
    assert_eq!(h.mock.requests().last().unwrap().body["messages"][1]["content"], "Refactor the config loader\nplease");

    // Close: frees the session; a prompt to it then fails.
    let id = h.agent.request("session/close", json!({"sessionId": first})).await;
    assert_eq!(h.agent.response(id).await.1["result"], json!({}));
    let id = prompt(&mut h.agent, &first, "still there?").await;
    assert_eq!(h.agent.response(id).await.1["error"]["code"], -32002);

    // Delete: gone from disk and from list; twice succeeds (item 29).
    for _ in 0..2 {
        let id = h.agent.request("session/delete", json!({"sessionId": first})).await;
        assert_eq!(h.agent.response(id).await.1["result"], json!({}));
    }
    let id = h.agent.request("session/list", json!({"cwd": h.project})).await;
    assert_eq!(h.agent.response(id).await.1["result"]["sessions"], json!([]));
    let id = h.agent.request("session/load", json!({"sessionId": first, "cwd": h.project, "mcpServers": []})).await;
    assert_eq!(h.agent.response(id).await.1["error"]["code"], -32002);
}

/// Closing a session with a running turn cancels it first (item 24): both
/// the close and the prompt are answered, the prompt `cancelled` (in either
/// order: the close answers once the log is closed, the turn once it has
/// wound down).
#[tokio::test]
async fn close_cancels_a_running_turn() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("x"), Step::Stall]));
    let turn = prompt(&mut h.agent, &session, "hi").await;
    h.agent.until("the first chunk", |m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    let id = h.agent.request("session/close", json!({"sessionId": session})).await;
    let messages = h.agent.until_answered(&[id, turn]).await;
    assert_eq!(messages[answer_at(&messages, id).unwrap()]["result"], json!({}));
    assert_eq!(messages[answer_at(&messages, turn).unwrap()]["result"]["stopReason"], "cancelled");
    // The stalled stream was closed, not left to hang.
    h.mock.wait_for_disconnects(1, WAIT).await;
}

// A configured window: the mock's request log then holds only chat requests (no probe).
const TWO_MODELS: &str = "\n[models.thinker]\nbase_url = \"$MOCK_BASE_URL\"\nmodel = \"thinker-model\"\nreasoning_effort = \"medium\"\ncontext_window = 32768\n";

async fn two_model_harness() -> Harness {
    // The second model shares the mock.
    Harness::with_config(TWO_MODELS).await
}

/// Model and reasoning effort are config options that round-trip and reach the model (items 52, 53).
#[tokio::test]
async fn model_and_reasoning_options_round_trip() {
    let mut h = two_model_harness().await;
    let session = h.session().await;
    let id = h
        .agent
        .request("session/set_config_option", json!({"sessionId": session, "configId": "model", "value": "thinker"}))
        .await;
    let (_, response) = h.agent.response(id).await;
    let options = response["result"]["configOptions"].as_array().unwrap().clone();
    let ids: Vec<&str> = options.iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["model", "mode", "thought_level"], "complete state, the effort appears for this model");
    assert_eq!(options[0]["currentValue"], "thinker");
    assert_eq!(options[0]["category"], "model");
    assert_eq!(options[2]["category"], "thought_level");
    assert_eq!(options[2]["currentValue"], "medium", "every option has a default");

    let id = h
        .agent
        .request(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "thought_level", "value": "high"}),
        )
        .await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["configOptions"][2]["currentValue"], "high");

    h.mock.push(text_reply("thinking hard"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.agent.response(id).await;
    let body = &h.mock.requests()[0].body;
    assert_eq!(body["model"], "thinker-model");
    assert_eq!(body["reasoning_effort"], "high");

    // Back to the first model: the effort option goes away.
    let id = h
        .agent
        .request("session/set_config_option", json!({"sessionId": session, "configId": "model", "value": "mock"}))
        .await;
    let (_, response) = h.agent.response(id).await;
    let ids: Vec<&str> =
        response["result"]["configOptions"].as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["model", "mode"]);
    let id = h
        .agent
        .request("session/set_config_option", json!({"sessionId": session, "configId": "model", "value": "nope"}))
        .await;
    assert_eq!(h.agent.response(id).await.1["error"]["code"], -32602);
}

#[tokio::test]
async fn builtin_slash_commands() {
    let mut h = two_model_harness().await;
    let id = h.agent.request("initialize", json!({"protocolVersion": 1})).await;
    h.agent.response(id).await;
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap().to_owned();
    let commands = h.agent.next_message(Duration::from_secs(5)).await.unwrap();
    let names: Vec<&str> = commands["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let expected =
        ["compact", "clear", "init", "model", "mode", "undo", "redo", "checkpoints", "permissions", "skills"];
    assert_eq!(names, expected);

    // /model <name>: switches, says so, and tells the editor the new state.
    let id = prompt(&mut h.agent, &session, "/model thinker").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(agent_text(&before).contains("Switched to thinker-model"), "{}", agent_text(&before));
    assert_eq!(updates_of_kind(&before, "config_option_update")[0]["configOptions"][0]["currentValue"], "thinker");
    // /mode <name>
    let id = prompt(&mut h.agent, &session, "/mode full-auto").await;
    let (before, _) = h.agent.response(id).await;
    assert_eq!(updates_of_kind(&before, "current_mode_update")[0]["currentModeId"], "full-auto");
    let id = prompt(&mut h.agent, &session, "/mode").await;
    let (before, _) = h.agent.response(id).await;
    assert!(agent_text(&before).contains("`full-auto`") && agent_text(&before).contains("(current)"));
    assert!(h.mock.requests().is_empty(), "none of these reached the model");

    // /clear: the next request starts fresh.
    h.mock.push(text_reply("first"));
    let id = prompt(&mut h.agent, &session, "remember 42").await;
    h.agent.response(id).await;
    let id = prompt(&mut h.agent, &session, "/clear").await;
    let (before, _) = h.agent.response(id).await;
    assert!(agent_text(&before).contains("fresh conversation"));
    h.mock.push(text_reply("second"));
    let id = prompt(&mut h.agent, &session, "what number?").await;
    h.agent.response(id).await;
    let body = &h.mock.requests()[1].body;
    assert_eq!(body["messages"].as_array().unwrap().len(), 2, "system + the new question only: {body}");

    // /compact: the model summarises, the history becomes the summary.
    h.mock.push(text_reply("SUMMARY: the user asked about a number."));
    let id = prompt(&mut h.agent, &session, "/compact").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(agent_text(&before).contains("Compacted"), "{}", agent_text(&before));
    let summary_request = &h.mock.requests()[2].body;
    let last = summary_request["messages"].as_array().unwrap().last().unwrap();
    assert!(last["content"].as_str().unwrap().contains("summary"), "{last}");
    h.mock.push(text_reply("after compaction"));
    let id = prompt(&mut h.agent, &session, "and now?").await;
    h.agent.response(id).await;
    let body = &h.mock.requests()[3].body;
    assert!(body["messages"][1]["content"].as_str().unwrap().contains("SUMMARY: the user asked about a number."));
    assert_eq!(body["messages"].as_array().unwrap().last().unwrap()["content"], "and now?");
}

/// `/init` asks the model to write AGENTS.md, behind permission.
#[tokio::test]
async fn init_writes_agents_md_behind_permission() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(tool_call_reply(&[(
        "call_w",
        "write_file",
        json!({"path": "AGENTS.md", "content": "# Agents\nRun `make test`.\n"}),
    )]));
    h.mock.push(text_reply("Wrote AGENTS.md."));
    let id = prompt(&mut h.agent, &session, "/init").await;
    let mut editor = FakeEditor::answering(&[Permission::Select("allow_once")]);
    let (_, response) = h.agent.response_answering(id, |r| editor.answer(r)).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(editor.requests_for("session/request_permission").len(), 1);
    assert!(std::fs::read_to_string(h.project.join("AGENTS.md")).unwrap().contains("make test"));
    let asked = h.mock.requests()[0].body["messages"][1]["content"].as_str().unwrap().to_owned();
    assert!(asked.contains("AGENTS.md"), "{asked}");
}

/// Project commands from `.lathe/commands/*.md`, with `$ARGUMENTS`.
#[tokio::test]
async fn custom_commands_expand_their_arguments() {
    let mut h = Harness::start().await;
    std::fs::create_dir_all(h.project.join(".lathe/commands")).unwrap();
    std::fs::write(
        h.project.join(".lathe/commands/review.md"),
        "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $ARGUMENTS for bugs.\n",
    )
    .unwrap();
    let id = h.agent.request("initialize", json!({"protocolVersion": 1})).await;
    h.agent.response(id).await;
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let session = h.agent.response(id).await.1["result"]["sessionId"].as_str().unwrap().to_owned();
    let commands = h.agent.next_message(Duration::from_secs(5)).await.unwrap();
    let review = commands["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "review")
        .cloned()
        .expect("the project command is offered");
    assert_eq!(review["description"], "Review a file");
    assert_eq!(review["input"]["hint"], "<file>");
    h.mock.push(text_reply("Looks fine."));
    let id = prompt(&mut h.agent, &session, "/review src/lib.rs").await;
    h.agent.response(id).await;
    assert_eq!(h.mock.requests()[0].body["messages"][1]["content"], "Review src/lib.rs for bugs.");
}

/// AGENTS.md (and CLAUDE.md where there is none) reach the system prompt.
#[tokio::test]
async fn project_instructions_are_in_the_system_prompt() {
    let mut h = Harness::start().await;
    std::fs::create_dir_all(h.project.join(".git")).unwrap();
    std::fs::write(h.project.join("AGENTS.md"), "Always run `cargo test` before answering.").unwrap();
    let user_dir = crate::support::agent_env::config_dir(h.home.path());
    std::fs::create_dir_all(&user_dir).unwrap();
    std::fs::write(user_dir.join("AGENTS.md"), "The user prefers British spelling.").unwrap();
    let session = h.session().await;
    h.mock.push(text_reply("ok"));
    let id = prompt(&mut h.agent, &session, "hi").await;
    h.agent.response(id).await;
    let system = h.mock.requests()[0].body["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(system.contains("Always run `cargo test` before answering."), "{system}");
    assert!(system.contains("British spelling"), "{system}");
    assert!(system.find("British") < system.find("cargo test"), "user-level first, then the project");
}

/// A long session that crosses the window is compacted and the turn finishes.
#[tokio::test]
async fn a_long_session_is_compacted_automatically() {
    // A tiny window: 1000 tokens; compaction at 80%.
    let mut h = Harness::with_config("").await;
    let config = h.home.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace("context_window = 32768", "context_window = 1000");
    std::fs::write(&config, text).unwrap();
    h.restart().await;
    let session = h.session().await;
    let long = "word ".repeat(300); // ~1500 bytes, ~375 tokens
    for i in 0..3 {
        // Exact usage after each turn: 210, 410, 610 tokens.
        h.mock.push(Reply::Sse(vec![
            ev_role(),
            ev_text(&format!("answer {i}")),
            ev_finish("stop"),
            ev_usage(200 * (i + 1), 10),
            Step::Done,
        ]));
        let id = prompt(&mut h.agent, &session, &format!("question {i}: {long}")).await;
        let (_, response) = h.agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn");
    }
    // The 4th prompt (610 + ~380 tokens) would cross 800: a summary request comes first.
    h.mock.push(text_reply("SUMMARY of questions 0-2"));
    h.mock.push(text_reply("final answer"));
    let last = format!("question 3: {long}");
    let id = prompt(&mut h.agent, &session, &last).await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "final answer");
    let requests = h.mock.requests();
    assert_eq!(requests.len(), 5);
    let summary_request = &requests[3].body;
    assert!(
        summary_request["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("summary")
    );
    let after = &requests[4].body;
    let messages = after["messages"].as_array().unwrap();
    assert!(messages[1]["content"].as_str().unwrap().contains("SUMMARY of questions 0-2"));
    assert_eq!(messages.last().unwrap()["content"], last.as_str());
    assert!(messages.len() < 8, "older messages were replaced: {}", messages.len());
}

/// A huge tool output is trimmed in the history (head and tail kept).
#[tokio::test]
async fn huge_tool_outputs_are_trimmed_in_history() {
    let mut h = Harness::with_config("[context]\nmax_tool_output_bytes = 2048\n").await;
    let session = h.session().await;
    let id = h.agent.request("session/set_mode", json!({"sessionId": session, "modeId": "full-auto"})).await;
    h.agent.response(id).await;
    h.mock.push(tool_call_reply(&[("call_s", "shell", json!({"command": crate::support::commands::count_to(5000)}))]));
    h.mock.push(text_reply("long"));
    let id = prompt(&mut h.agent, &session, "count").await;
    h.agent.response(id).await;
    let body = &h.mock.requests()[1].body;
    let result = body["messages"][3]["content"].as_str().unwrap();
    assert!(result.len() < 2300, "{}", result.len());
    assert!(result.contains("Exit code: 0") && result.contains("5000") && result.contains("omitted"), "{result}");
}

/// With no usage from the server, lathe reports a labelled estimate.
#[tokio::test]
async fn usage_is_estimated_when_the_server_reports_none() {
    let mut h = Harness::start().await;
    let session = h.session().await;
    h.mock.push(Reply::Sse(vec![ev_role(), ev_text("no usage here"), ev_finish("stop"), Step::Done]));
    let id = prompt(&mut h.agent, &session, "hi").await;
    let (before, _) = h.agent.response(id).await;
    let usage = updates_of_kind(&before, "usage_update");
    assert_eq!(usage.len(), 1);
    assert!(usage[0]["used"].as_u64().unwrap() > 100, "system prompt and tools are counted: {}", usage[0]);
    assert_eq!(usage[0]["size"], 32768);
    assert_eq!(usage[0]["_meta"]["lathe"]["estimated"], true);
}
