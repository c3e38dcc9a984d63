//! Smoke tests of the mock model server itself, driven by a plain HTTP client.

use std::time::Duration;

use futures_util::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::mock_openai::{MockOpenAi, Reply, Step, ev_role, ev_text, text_reply, tool_call_reply};

const WAIT: Duration = Duration::from_secs(5);

fn client() -> reqwest::Client {
    lathe::http::client_builder().no_proxy().build().unwrap()
}

async fn post_chat(mock: &MockOpenAi, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{}/chat/completions", mock.base_url()))
        .header("content-type", "application/json")
        .header("authorization", "Bearer test-key")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE body, in order.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n").filter_map(|event| event.strip_prefix("data: ")).map(str::to_owned).collect()
}

#[tokio::test]
async fn sse_reply_is_streamed_and_the_request_recorded() {
    let mock = MockOpenAi::start().await;
    mock.push(text_reply("hello world"));

    let response = post_chat(&mock, &json!({"model": "mock-model", "stream": true})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let body = response.text().await.unwrap();

    let data = sse_data(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let text: String = data
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "hello world");

    let requests = mock.wait_for_requests(1, WAIT).await;
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].body["model"], "mock-model");
    assert_eq!(requests[0].header("Authorization"), Some("Bearer test-key"));
    assert_eq!(mock.pending_replies(), 0);
    assert_eq!(mock.disconnects(), 0);
}

#[tokio::test]
async fn tool_call_arguments_reassemble() {
    let mock = MockOpenAi::start().await;
    let args = json!({"path": "src/main.rs", "line": 3});
    mock.push(tool_call_reply(&[("call_1", "read_file", args.clone())]));

    let body = post_chat(&mock, &json!({})).await.text().await.unwrap();
    let mut arguments = String::new();
    for data in sse_data(&body) {
        if let Ok(chunk) = serde_json::from_str::<Value>(&data)
            && let Some(fragment) = chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        {
            arguments.push_str(fragment);
        }
    }
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), args);
    assert!(body.contains(r#""finish_reason":"tool_calls""#));
}

#[tokio::test]
async fn an_unexpected_request_gets_an_explanatory_417() {
    let mock = MockOpenAi::start().await;
    let response = post_chat(&mock, &json!({"messages": "hi"})).await;
    assert_eq!(response.status(), 417);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("mock: unexpected request #1: {"), "{message}");
    assert!(message.contains("hi"), "{message}");
    assert_eq!(body["error"]["type"], "mock_error");
}

#[tokio::test]
async fn status_and_json_replies() {
    let mock = MockOpenAi::start().await;
    mock.push(Reply::Status {
        status: 429,
        body: json!({"error": {"message": "slow down"}}).to_string(),
        headers: vec![("Retry-After".into(), "2".into())],
    });
    mock.push(Reply::Json(json!({"object": "chat.completion"})));

    let limited = post_chat(&mock, &json!({})).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "2");
    assert_eq!(limited.headers()["content-type"], "application/json");

    let plain = post_chat(&mock, &json!({})).await;
    assert_eq!(plain.status(), 200);
    assert_eq!(plain.headers()["content-type"], "application/json");
    let body: Value = serde_json::from_str(&plain.text().await.unwrap()).unwrap();
    assert_eq!(body["object"], "chat.completion");
}

#[tokio::test]
async fn a_stall_flushes_what_came_before_and_counts_the_client_leaving() {
    let mock = MockOpenAi::start().await;
    mock.push(Reply::Sse(vec![ev_role(), ev_text("partial"), Step::Stall]));

    let response = post_chat(&mock, &json!({})).await;
    let mut stream = response.bytes_stream();
    let mut received = String::new();
    while !received.contains("partial") {
        let chunk = tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("steps before a stall arrive promptly")
            .unwrap()
            .unwrap();
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(mock.disconnects(), 0);

    drop(stream);
    mock.wait_for_disconnects(1, WAIT).await;
}

#[tokio::test]
async fn a_drop_step_is_an_error_for_the_client_not_a_clean_end() {
    let mock = MockOpenAi::start().await;
    mock.push(Reply::Sse(vec![ev_text("partial"), Step::Drop]));

    let mut stream = post_chat(&mock, &json!({})).await.bytes_stream();
    let mut received = String::new();
    let outcome = loop {
        match tokio::time::timeout(WAIT, stream.next()).await.unwrap() {
            Some(Ok(chunk)) => received.push_str(&String::from_utf8_lossy(&chunk)),
            Some(Err(error)) => break Err(error),
            None => break Ok(()),
        }
    };
    assert!(received.contains("partial"), "{received:?}");
    assert!(outcome.is_err(), "the stream ended cleanly after Step::Drop");
    assert_eq!(mock.disconnects(), 0);
}
