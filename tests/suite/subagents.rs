//! Sub-agents (`task`, issue 27) as an editor sees them: with a client that
//! offers `subagents`, each sub-agent is a subagent session announced on
//! the parent's session and linked from the task call, its own updates
//! under its session id; with one that does not, its tool calls are the
//! parent session's, each with `_meta.lathe.parentToolCallId`, and the task
//! call shows its latest step. `session/load` replays what the user saw,
//! both ways, and never sends subagent updates to a client without the
//! capability. (The turn itself, concurrency, cancellation and the rules
//! children follow are the turn loop's unit tests, src/agent/tests.rs.)

use serde_json::{Value, json};

use crate::support::acp_client::{initialize, prompt, seen, updates_for, updates_of_kind};
use crate::support::harness::Harness;
use crate::support::mock_openai::{content_reply, text_reply, tool_call_reply, tool_result};

/// One turn whose model hands a job to the explore agent, which reads
/// `notes.txt` and reports. Returns the messages the client saw.
async fn task_turn(h: &mut Harness, session: &str) -> Vec<Value> {
    std::fs::write(h.project.join("notes.txt"), "the secret is 42\n").unwrap();
    h.mock.push(tool_call_reply(&[(
        "call_t",
        "task",
        json!({"description": "find the secret", "prompt": "Read notes.txt and report the secret."}),
    )]));
    h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": "notes.txt"}))]));
    h.mock.push(text_reply("It is 42 (notes.txt)."));
    h.mock.push(text_reply("The secret is 42."));
    let id = prompt(&mut h.agent, session, "what is the secret?").await;
    let (messages, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let requests = h.mock.chat_requests();
    assert_eq!(tool_result(&requests[3].body, "call_t"), "It is 42 (notes.txt).");
    messages
}

/// Restarts the agent and loads `session` with these capabilities: the replay.
async fn reload(h: &mut Harness, session: &str, capabilities: Value) -> Vec<Value> {
    h.restart().await;
    initialize(&mut h.agent, capabilities).await;
    let id = h.agent.request("session/load", json!({"sessionId": session, "cwd": h.project, "mcpServers": []})).await;
    let (replay, response) = h.agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    replay
}

fn session_of(message: &Value) -> &str {
    message["params"]["sessionId"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn without_subagents_the_childs_calls_are_the_parents_with_its_id() {
    let mut h = Harness::start().await;
    let session = h.session().await;

    let messages = task_turn(&mut h, &session).await;

    assert!(messages.iter().all(|m| m.get("method").is_none() || session_of(m) == session), "one session");
    assert!(updates_of_kind(&messages, "subagent_update").is_empty());
    let child = updates_for(&messages, "call_t.call_r");
    assert_eq!(child[0]["sessionUpdate"], "tool_call");
    assert_eq!(child[0]["name"], "read_file");
    assert!(child.iter().all(|u| u["_meta"]["lathe"]["parentToolCallId"] == "call_t"), "{child:#?}");
    assert_eq!(child.last().unwrap()["status"], "completed");
    // The task call: its title, a step line per child step, the report.
    let task = updates_for(&messages, "call_t");
    assert!(task.iter().any(|u| u["title"] == "explore: find the secret"), "{task:#?}");
    assert!(
        task.iter().any(|u| u["content"][0]["content"]["text"].as_str().is_some_and(|t| t.starts_with("Read "))),
        "{task:#?}"
    );
    let last = task.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["content"][0]["content"]["text"], "It is 42 (notes.txt).");
    // The child's prose is not the parent's answer.
    let text: String = updates_of_kind(&messages, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(text, "The secret is 42.");

    let replay = reload(&mut h, &session, json!({})).await;
    let mut expected = vec![
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "what is the secret?"}}),
    ];
    expected.extend(seen(&messages));
    assert_eq!(seen(&replay), expected, "the replay is what the user saw");
}

#[tokio::test]
async fn with_subagents_each_child_is_a_subagent_session() {
    let mut h = Harness::start().await;
    let session = h.session_with(json!({"subagents": {}})).await;

    let messages = task_turn(&mut h, &session).await;

    let child_id = format!("{session}.call_t");
    let updates: Vec<&Value> = messages.iter().filter(|m| m["method"] == "session/update").collect();
    let announced = updates
        .iter()
        .position(|m| m["params"]["update"]["sessionUpdate"] == "subagent_update")
        .expect("the child is announced");
    let first_child = updates.iter().position(|m| session_of(m) == child_id).expect("the child's own updates");
    assert!(announced < first_child, "announced before any of its traffic");
    let announce = &updates[announced]["params"];
    assert_eq!(announce["sessionId"], session.as_str(), "announced on the parent's session");
    assert_eq!(announce["update"]["sessionId"], child_id.as_str());
    assert_eq!(announce["update"]["title"], "explore");
    assert_eq!(announce["update"]["description"], "find the secret");
    assert_eq!(announce["update"]["state"], json!({"state": "running"}));
    // The task call links to it, before and after it ends.
    let task = updates_for(&messages, "call_t");
    let linked = |u: &&Value| {
        u["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|i| i["type"] == "session" && i["sessionId"] == child_id.as_str()))
    };
    assert!(task.iter().any(linked), "{task:#?}");
    assert!(linked(task.last().unwrap()), "{task:#?}");
    // Its job, its tool call and its answer are in its session, not the parent's.
    let child: Vec<&Value> = updates.iter().copied().filter(|m| session_of(m) == child_id).collect();
    let kinds: Vec<&str> = child.iter().map(|m| m["params"]["update"]["sessionUpdate"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "session_message", "{kinds:?}");
    assert_eq!(child[0]["params"]["update"]["content"][0]["text"], "Read notes.txt and report the secret.");
    assert!(kinds.contains(&"tool_call") && kinds.contains(&"agent_message_chunk"), "{kinds:?}");
    assert!(updates_for(&messages, "call_t.call_r").iter().all(|u| u.get("_meta").is_none()));
    let ended = updates_of_kind(&messages, "subagent_update");
    assert_eq!(ended.last().unwrap()["state"], json!({"state": "idle", "stopReason": "end_turn"}));
    let parent_text: String = updates
        .iter()
        .filter(|m| session_of(m) == session && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(parent_text, "The secret is 42.");

    // Replayed the same way to a client that shows subagent sessions...
    let replay = reload(&mut h, &session, json!({"subagents": {}})).await;
    let mut expected = vec![
        json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "what is the secret?"}}),
    ];
    expected.extend(seen(&messages));
    assert_eq!(seen(&replay), expected, "the replay is what the user saw");
    let replayed: Vec<&Value> = replay.iter().filter(|m| m["method"] == "session/update").collect();
    assert!(
        replayed.iter().position(|m| m["params"]["update"]["sessionUpdate"] == "subagent_update")
            < replayed.iter().position(|m| session_of(m) == child_id)
    );

    // ...and without any of it to one that does not.
    let replay = reload(&mut h, &session, json!({})).await;
    assert!(replay.iter().all(|m| m.get("method").is_none() || session_of(m) == session), "{replay:#?}");
    assert!(updates_of_kind(&replay, "subagent_update").is_empty());
    assert!(!serde_json::to_string(&replay).unwrap().contains(r#""type":"session""#));
    assert_eq!(
        updates_for(&replay, "call_t").last().unwrap()["content"][0]["content"]["text"],
        "It is 42 (notes.txt)."
    );
}

/// A project agent file (`.lathe/agents/<name>.md`): the task tool lists it,
/// it runs with its own prompt and only the tools it names; a write it may
/// make is asked about in its own session (a client with `subagents`), the
/// question naming it.
#[tokio::test]
async fn a_project_agent_runs_with_its_prompt_and_tools_and_asks_in_its_session() {
    let mut h = Harness::start().await;
    let agents = h.project.join(".lathe/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("scribe.md"),
        "---\nname: scribe\ndescription: Writes notes\ntools: Read, Write\n---\nYou are the scribe.\n",
    )
    .unwrap();
    let session = h.session_with(json!({"subagents": {}})).await;
    h.mock.push(tool_call_reply(&[(
        "call_t",
        "task",
        json!({"description": "write a note", "prompt": "Write note.txt", "agent": "scribe"}),
    )]));
    h.mock.push(tool_call_reply(&[("call_w", "write_file", json!({"path": "note.txt", "content": "noted\n"}))]));
    h.mock.push(text_reply("Wrote note.txt."));
    h.mock.push(text_reply("Done."));
    let id = prompt(&mut h.agent, &session, "take a note").await;
    let mut asked = Vec::new();
    let (_, response) = h
        .agent
        .response_answering(id, |request| {
            asked.push(request.clone());
            crate::support::acp_client::Answer::Result(
                json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
            )
        })
        .await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let requests = h.mock.chat_requests();
    let task: Vec<&Value> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|tool| tool["function"]["name"] == "task")
        .collect();
    let description = task[0]["function"]["description"].as_str().unwrap();
    assert!(description.contains("- explore: ") && description.contains("- scribe: Writes notes"), "{description}");
    let child = &requests[1].body;
    assert!(child["messages"][0]["content"].as_str().unwrap().contains("You are the scribe."));
    let offered: Vec<&str> =
        child["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["read_file", "write_file"]);
    assert_eq!(asked.len(), 1, "{asked:#?}");
    assert_eq!(asked[0]["method"], "session/request_permission");
    assert_eq!(asked[0]["params"]["sessionId"], format!("{session}.call_t"), "asked in the child's session");
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "call_t.call_w");
    assert!(asked[0]["params"]["toolCall"]["title"].as_str().unwrap().starts_with("scribe agent: "));
    assert_eq!(std::fs::read_to_string(h.project.join("note.txt")).unwrap(), "noted\n");
}

/// A sub-agent works by the project's rules: its system prompt carries the
/// session's AGENTS.md, as the parent's does (Claude Code's sub-agents get
/// CLAUDE.md, codex's AGENTS.md).
#[tokio::test]
async fn a_sub_agent_gets_the_projects_instructions() {
    let mut h = Harness::start().await;
    std::fs::write(h.project.join("AGENTS.md"), "Project rule: the tests run with `make check`.\n").unwrap();
    let session = h.session().await;

    task_turn(&mut h, &session).await;

    let requests = h.mock.chat_requests();
    let system = |i: usize| requests[i].body["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(system(0).contains("Project rule: the tests run with `make check`."), "{}", system(0));
    let child = system(1);
    assert!(child.starts_with("You are a sub-agent of lathe"), "{child}");
    assert!(child.contains("Project rule: the tests run with `make check`."), "{child}");
    assert_eq!(requests[1].body["messages"][1]["content"], "Read notes.txt and report the secret.");
}

/// The text of the `agent_message_chunk`s of session `session` among `messages`.
fn streamed_in(messages: &[Value], session: &str) -> String {
    messages
        .iter()
        .filter(|m| session_of(m) == session && m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect()
}

/// Two sub-agents streaming at once are journaled as the session's own
/// answers are: each message's chunks merged into one record (not a line
/// per chunk), and `session/load` replays all of their text in their
/// sessions.
#[tokio::test]
async fn sub_agents_streams_are_journaled_merged_and_replayed() {
    let mut h = Harness::start().await;
    let session = h.session_with(json!({"subagents": {}})).await;
    h.mock.push(tool_call_reply(&[
        ("call_a", "task", json!({"description": "one", "prompt": "Stream."})),
        ("call_b", "task", json!({"description": "two", "prompt": "Stream too."})),
    ]));
    let pieces = |tag: char| (0..200).map(|n| format!("{tag}{n} ")).collect::<Vec<_>>();
    let (a, b) = (pieces('a'), pieces('b'));
    h.mock.push(content_reply(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    h.mock.push(content_reply(&b.iter().map(String::as_str).collect::<Vec<_>>()));
    h.mock.push(text_reply("Both done."));
    let id = prompt(&mut h.agent, &session, "stream twice").await;
    let (live, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let children = [format!("{session}.call_a"), format!("{session}.call_b")];
    let texts: Vec<String> = children.iter().map(|child| streamed_in(&live, child)).collect();
    let mut sorted = texts.clone();
    sorted.sort();
    assert_eq!(sorted, [a.concat(), b.concat()], "each child streamed one of the answers");
    let chunks = live.iter().filter(|m| children.iter().any(|c| session_of(m) == c.as_str())).count();
    assert!(chunks > 200, "the children streamed in many chunks ({chunks})");
    let id = h.agent.request("session/close", json!({"sessionId": session})).await;
    h.agent.response(id).await;

    let log =
        std::fs::read_to_string(h.home.path().join(".local/share/lathe/sessions").join(&session).join("log.jsonl"))
            .unwrap();
    let child_lines: Vec<&str> =
        log.lines().filter(|l| children.iter().any(|c| l.contains(&format!("\"{c}\"")))).collect();
    assert!(child_lines.len() < 20, "{} log lines for the children's {chunks} updates", child_lines.len());
    assert!(!child_lines.iter().any(|l| l.contains("agent_message_chunk")), "no chunk logged as sent");
    let streamed: Vec<&&str> = child_lines.iter().filter(|l| l.starts_with(r#"{"lathe":"subagent_chunk","#)).collect();
    for last in ["a199 ", "b199 "] {
        assert_eq!(streamed.iter().filter(|l| l.contains(last)).count(), 1, "one record: {streamed:#?}");
    }

    let replay = reload(&mut h, &session, json!({"subagents": {}})).await;
    let replayed: Vec<String> = children.iter().map(|child| streamed_in(&replay, child)).collect();
    assert_eq!(replayed, texts);
    assert_eq!(streamed_in(&replay, &session), "Both done.");
    let replay = reload(&mut h, &session, json!({})).await;
    assert!(replay.iter().all(|m| m.get("method").is_none() || session_of(m) == session), "{replay:#?}");
    assert_eq!(streamed_in(&replay, &session), "Both done.");
}
