//! JSON-RPC and ACP conformance: initialization, session
//! setup, the error codes for every kind of bad input, and that the agent
//! keeps serving after each. Item numbers refer to the conformance checklist
//! in `acp/spec-digest.md`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, prompt};
use crate::support::clock::FrozenClock;
use crate::support::harness::Harness;
use crate::support::mock_openai::text_reply;

fn error_code(response: &Value) -> i64 {
    response["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error response, got {response}"))
}

fn error_message(response: &Value) -> String {
    response["error"]["message"].as_str().unwrap_or_default().to_owned()
}

/// Items 9, 10, 11: the chosen version, capabilities, name and version.
#[tokio::test]
async fn initialize_negotiates_version_1_and_describes_the_agent() {
    let mut h = Harness::start().await;
    for (asked, answered) in [(1, 1), (2, 1), (0, 1), (65535, 1)] {
        let id = h.agent.request("initialize", json!({"protocolVersion": asked, "clientCapabilities": {}})).await;
        let (before, response) = h.agent.response(id).await;
        assert!(before.is_empty());
        let result = &response["result"];
        assert_eq!(result["protocolVersion"], answered, "asked {asked}: {response}");
        assert_eq!(result["agentInfo"]["name"], "lathe");
        assert_eq!(result["agentInfo"]["version"], env!("CARGO_PKG_VERSION"));
        let caps = &result["agentCapabilities"];
        assert_eq!(caps["promptCapabilities"]["embeddedContext"], true);
        assert_eq!(caps["promptCapabilities"]["image"], false, "the test model is not marked vision = true");
        assert_ne!(caps["promptCapabilities"]["audio"], true);
        assert_eq!(caps["loadSession"], true, "sessions are saved under the test home");
        for capability in ["list", "resume", "close", "delete", "additionalDirectories"] {
            assert_eq!(caps["sessionCapabilities"][capability], json!({}), "{capability}");
        }
        // A working config: the one method that uses it (tests/suite/auth.rs has the rest).
        let methods: Vec<&str> =
            result["authMethods"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(methods, ["lathe-config"], "{response}");
    }
    h.agent.assert_stdout_is_only_jsonrpc();
}

#[tokio::test]
async fn a_vision_model_advertises_images() {
    let mut h = Harness::with_config("vision = true\n").await;
    let id = h.agent.request("initialize", json!({"protocolVersion": 1})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["agentCapabilities"]["promptCapabilities"]["image"], true);
}

/// Item 19: unique session ids; item 20: cwd must be absolute; mcpServers accepted.
#[tokio::test]
async fn session_new_gives_unique_ids_and_checks_cwd() {
    let mut h = Harness::start().await;
    let first = h.session().await;
    let id = h
        .agent
        .request(
            "session/new",
            json!({"cwd": h.project, "mcpServers": [{"name": "fs", "command": "/bin/true", "args": [], "env": []}]}),
        )
        .await;
    let (_, response) = h.agent.response(id).await;
    let second = response["result"]["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(first, second);

    let id = h.agent.request("session/new", json!({"cwd": "relative/dir", "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(error_code(&response), -32602);
    assert!(error_message(&response).contains("cwd must be an absolute path"), "{response}");

    // mcpServers omitted: tolerated.
    let id = h.agent.request("session/new", json!({"cwd": h.project})).await;
    let (_, response) = h.agent.response(id).await;
    assert!(response["result"]["sessionId"].is_string(), "{response}");
    h.agent.assert_stdout_is_only_jsonrpc();
}

#[tokio::test]
async fn requests_before_initialize_are_refused() {
    let mut h = Harness::start().await;
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(error_code(&response), -32600);
    assert!(error_message(&response).contains("initialize"), "{response}");
    // Then the normal path works.
    h.session().await;
}

/// Malformed input of every kind gets the precise error, and the agent keeps serving.
/// Issue 11, defect 17: a large integer id (and a fractional one) comes back
/// byte for byte in the response (JSON-RPC: the response id equals the request id).
#[tokio::test]
async fn large_ids_are_echoed_exactly() {
    let mut h = Harness::start().await;
    for id in ["1000000000000000000000000000001", "12345678901234567890123", "2.5"] {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"initialize\",\"params\":{{\"protocolVersion\":1}}}}\n"
        );
        h.agent.send_raw(line.as_bytes()).await;
        let reply = h.agent.next_message(Duration::from_secs(5)).await.expect("an answer");
        assert!(reply.get("result").is_some(), "{reply}");
        let raw = h.agent.raw_stdout_lines().last().cloned().unwrap();
        assert!(raw.starts_with(&format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},")), "{raw}");
    }
}

#[tokio::test]
async fn malformed_input_is_answered_and_survived() {
    let mut h = Harness::start().await;
    let session = h.session().await;

    let cases: Vec<(&[u8], i64)> = vec![
        (b"this is not json\n", -32700),
        (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\xff\xfe}\n", -32700),
        (b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}]\n", -32600),
        (b"{\"id\":5,\"method\":\"initialize\"}\n", -32600),
        (b"{\"jsonrpc\":\"2.0\",\"id\":6}\n", -32600),
        (b"\"just a string\"\n", -32600),
    ];
    for (line, code) in cases {
        h.agent.send_raw(line).await;
        let reply = h.agent.next_message(Duration::from_secs(5)).await.expect("an error answer");
        assert_eq!(reply["error"]["code"], code, "for {:?}: {reply}", String::from_utf8_lossy(line));
        if code == -32700 {
            assert_eq!(reply["id"], Value::Null, "parse errors are answered with id null");
        }
    }

    // Unknown method: -32601 (item 60), also for extension requests.
    for method in ["nope/nothing", "_lathe/unknown"] {
        let id = h.agent.request(method, json!({})).await;
        let (_, response) = h.agent.response(id).await;
        assert_eq!(error_code(&response), -32601, "{method}");
    }

    // Unknown notifications are ignored, not answered (items 7, 60).
    h.agent.notify("_lathe/whatever", json!({})).await;
    h.agent.notify("no/such/notification", json!({})).await;
    let answers = h.agent.barrier().await;
    assert!(answers.is_empty(), "{answers:?}");

    // Invalid params name the field.
    let id = h.agent.request("session/prompt", json!({"prompt": []})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(error_code(&response), -32602);
    assert!(error_message(&response).contains("sessionId"), "{response}");
    let id = h.agent.request("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text"}]})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(error_code(&response), -32602);
    assert!(error_message(&response).contains("prompt[0]"), "{response}");

    // Unknown session: -32002 with the id in data.
    let id = h
        .agent
        .request("session/prompt", json!({"sessionId": "sess_nope", "prompt": [{"type": "text", "text": "hi"}]}))
        .await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(error_code(&response), -32002);
    assert_eq!(response["error"]["data"]["sessionId"], "sess_nope");

    // A response to a request we never sent is ignored.
    h.agent.send(json!({"jsonrpc": "2.0", "id": 424242, "result": {}})).await;

    // After all of that, a real prompt still works.
    h.mock.push(text_reply("still here"));
    let id = prompt(&mut h.agent, &session, "hello").await;
    let (before, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent_text(&before), "still here");
    h.agent.assert_stdout_is_only_jsonrpc();
}

#[tokio::test]
async fn an_oversized_message_is_refused_without_reading_it_whole() {
    let mut h = Harness::with_config("[protocol]\nmax_message_bytes = 4096\n").await;
    h.session().await;
    let mut line = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"initialize\",\"params\":{{\"x\":\"{}\"}}}}",
        "a".repeat(10_000)
    );
    line.push('\n');
    h.agent.send_raw(line.as_bytes()).await;
    let reply = h.agent.next_message(Duration::from_secs(5)).await.expect("an error answer");
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert!(reply["error"]["message"].as_str().unwrap().contains("over the limit"), "{reply}");
    let id = h.agent.request("initialize", json!({"protocolVersion": 1})).await;
    let (_, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["protocolVersion"], 1);
}

/// EOF on the input: everything is cancelled, the output flushed, and serve
/// ends cleanly, under a frozen clock: without waiting out any timer (the
/// binary's exit on EOF and on signals is in hygiene.rs).
#[tokio::test(start_paused = true)]
async fn eof_ends_cleanly_and_promptly() {
    let clock = FrozenClock::hold().await;
    let mut h = Harness::start().await;
    h.session().await;
    h.agent.close_stdin();
    let exit = h.agent.wait_exit(Duration::from_secs(5)).await.expect("serve ends after EOF");
    assert!(exit.success(), "{exit:?}\n{}", h.agent.stderr());
    assert_eq!(clock.elapsed(), Duration::ZERO, "no timer was waited out");
    h.agent.assert_stdout_is_only_jsonrpc();
}
