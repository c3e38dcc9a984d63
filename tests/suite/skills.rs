//! Skills (issue 27) as an editor sees them: `SKILL.md` folders in the
//! project's `.lathe/skills/` and `.agents/skills/` and the user's
//! `skills/` are listed in the system prompt, sorted, the same bytes every
//! request; each is a slash command in `available_commands_update`, with
//! `/skills` listing them; `/<skill> request` runs a turn whose prompt
//! carries the skill's body; the model reads a user skill's files without
//! the user being asked. (Which files are skipped, and the warnings, are
//! the unit tests of src/skills.rs.)

use std::path::Path;

use serde_json::{Value, json};

use crate::support::acp_client::{agent_text, initialize, prompt};
use crate::support::agent_env::config_dir;
use crate::support::harness::Harness;
use crate::support::mock_openai::{text_reply, tool_call_reply, tool_result};

fn skill(dir: &Path, name: &str, description: &str, body: &str) {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("SKILL.md"), format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"))
        .unwrap();
}

/// Two project skills (one in each folder), a user one, and a broken one.
fn with_skills(h: &Harness) {
    skill(
        &h.project.join(".lathe/skills"),
        "release",
        "Cuts a release. Use when asked to ship.",
        "Tag it: v$ARGUMENTS.",
    );
    skill(&h.project.join(".agents/skills"), "changelog", "Writes the changelog", "List the merged changes.");
    skill(&config_dir(h.home.path()).join("skills"), "notes", "Takes notes", "Write notes in notes.md.");
    let broken = h.project.join(".lathe/skills/broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("SKILL.md"), "---\nname: broken\n---\nno description").unwrap();
}

/// `initialize`, `session/new`, and the `available_commands_update` after it.
async fn session_and_commands(h: &mut Harness) -> (String, Vec<Value>) {
    initialize(&mut h.agent, json!({})).await;
    let id = h.agent.request("session/new", json!({"cwd": h.project, "mcpServers": []})).await;
    let (_, response) = h.agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{response}")).to_owned();
    let (_, commands) =
        h.agent.until("the commands", |m| m["params"]["update"]["sessionUpdate"] == "available_commands_update").await;
    (session, commands["params"]["update"]["availableCommands"].as_array().unwrap().clone())
}

async fn turn(h: &mut Harness, session: &str, text: &str) -> Vec<Value> {
    let id = prompt(&mut h.agent, session, text).await;
    let (messages, response) = h.agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}\n{}", h.agent.stderr());
    messages
}

fn system_of(body: &Value) -> &str {
    body["messages"][0]["content"].as_str().unwrap()
}

#[tokio::test]
async fn skills_are_listed_in_the_prompt_sorted_and_byte_stable() {
    let mut h = Harness::start().await;
    with_skills(&h);
    let (session, commands) = session_and_commands(&mut h).await;
    h.mock.push(text_reply("one"));
    h.mock.push(text_reply("two"));
    turn(&mut h, &session, "hello").await;
    turn(&mut h, &session, "again").await;

    let requests = h.mock.chat_requests();
    let system = system_of(&requests[0].body);
    assert_eq!(system, system_of(&requests[1].body), "byte-stable across turns");
    let lines: Vec<&str> =
        system.lines().filter(|line| line.starts_with("- ") && line.ends_with("SKILL.md)")).collect();
    let user = config_dir(h.home.path()).join("skills");
    assert_eq!(
        lines,
        [
            "- changelog: Writes the changelog (.agents/skills/changelog/SKILL.md)".to_owned(),
            format!("- notes: Takes notes ({})", user.join("notes").join("SKILL.md").display()),
            "- release: Cuts a release. Use when asked to ship. (.lathe/skills/release/SKILL.md)".to_owned(),
        ],
        "{system}"
    );
    assert!(system.contains("# Skills\n"), "{system}");
    assert!(!system.contains("broken"), "a skill without a description is left out: {system}");

    let names: Vec<&str> = commands.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for name in ["skills", "changelog", "notes", "release"] {
        assert!(names.contains(&name), "/{name} is offered: {names:?}");
    }
    let release = commands.iter().find(|c| c["name"] == "release").unwrap();
    assert_eq!(release["description"], "Cuts a release. Use when asked to ship.");
    assert_eq!(release["input"]["hint"], "[request]");
}

/// With no skills, nothing about skills is in the prompt.
#[tokio::test]
async fn without_skills_the_prompt_says_nothing_of_them() {
    let mut h = Harness::start().await;
    let (session, commands) = session_and_commands(&mut h).await;
    h.mock.push(text_reply("one"));
    turn(&mut h, &session, "hello").await;
    assert!(!system_of(&h.mock.chat_requests()[0].body).contains("Skills"));
    assert!(commands.iter().any(|c| c["name"] == "skills"), "/skills is always there");
    let listed = agent_text(&turn(&mut h, &session, "/skills").await);
    assert!(listed.starts_with("No skills."), "{listed}");
}

/// `/skills` lists them, lathe answering itself; `/<skill> request` runs a
/// turn whose prompt is the skill's body with the request in it, the
/// front matter left out.
#[tokio::test]
async fn skills_list_and_run_as_slash_commands() {
    let mut h = Harness::start().await;
    with_skills(&h);
    let (session, _) = session_and_commands(&mut h).await;

    let listed = agent_text(&turn(&mut h, &session, "/skills").await);
    assert!(listed.contains("- `/changelog`: Writes the changelog ("), "{listed}");
    assert!(listed.contains("- `/release`: Cuts a release."), "{listed}");
    assert!(h.mock.chat_requests().is_empty(), "lathe answered /skills itself");

    h.mock.push(text_reply("Tagged."));
    turn(&mut h, &session, "/release 2.0").await;
    h.mock.push(text_reply("Listed."));
    turn(&mut h, &session, "/changelog since 1.0").await;
    let requests = h.mock.chat_requests();
    let sent = requests[0].body["messages"][1]["content"].as_str().unwrap();
    let path = h.project.join(".lathe").join("skills").join("release").join("SKILL.md");
    assert!(sent.contains("Tag it: v2.0."), "$ARGUMENTS is the request: {sent}");
    assert!(sent.contains("`release`") && sent.contains(&path.display().to_string()), "{sent}");
    assert!(!sent.contains("description:"), "the front matter is left out: {sent}");
    let messages = requests[1].body["messages"].as_array().unwrap();
    let sent = messages[messages.len() - 1]["content"].as_str().unwrap();
    assert!(sent.contains("List the merged changes.\n</skill>\n\nsince 1.0"), "the request follows: {sent}");
    assert_eq!(system_of(&requests[0].body), system_of(&requests[1].body));
}

/// The model reads a user skill's SKILL.md (in lathe's config folder,
/// outside the project) in ask mode: the user is not asked.
#[tokio::test]
async fn a_user_skill_reads_without_asking() {
    let mut h = Harness::start().await;
    with_skills(&h);
    let (session, _) = session_and_commands(&mut h).await;
    let path = config_dir(h.home.path()).join("skills").join("notes").join("SKILL.md");
    h.mock.push(tool_call_reply(&[("call_r", "read_file", json!({"path": path}))]));
    h.mock.push(text_reply("Read it."));
    let messages = turn(&mut h, &session, "take notes").await;
    assert!(messages.iter().all(|m| m["method"] != "session/request_permission"), "{messages:#?}");
    let requests = h.mock.chat_requests();
    assert!(tool_result(&requests[1].body, "call_r").contains("Write notes in notes.md."));
}

/// `lathe exec` (and so `lathe chat`, the same engine): `/skills` lists the
/// skills and `/<skill> request` runs one, as in an editor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_lists_and_runs_skills() {
    let term = super::term_exec::Term::start("").await;
    skill(&term.project.join(".lathe/skills"), "release", "Cuts a release", "Tag it: v$ARGUMENTS.");
    let output = term.exec(&["/skills"], None).await;
    let listed = String::from_utf8_lossy(&output.stdout);
    assert!(listed.contains("- `/release`: Cuts a release (.lathe/skills/release/SKILL.md)"), "{listed}");
    term.mock.push(text_reply("Tagged."));
    let output = term.exec(&["/release 2.0"], None).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let requests = term.mock.chat_requests();
    assert_eq!(requests.len(), 1, "/skills asked the model nothing");
    let messages = requests[0].body["messages"].as_array().unwrap();
    let sent = messages[messages.len() - 1]["content"].as_str().unwrap();
    assert!(sent.contains("Tag it: v2.0."), "{sent}");
}
