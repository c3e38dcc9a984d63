//! The agents a `task` call can hand a job to (sub-agents): who they are,
//! what they may use, and what their system prompt says. The built-in
//! `explore` agent reads, lists, searches and fetches, and changes nothing.
//!
//! A sub-agent runs a turn of its own (see `agent::task`); this module only
//! describes agents. Which of an agent's tools it really gets is decided by
//! the turn: never more than the parent offers, never `task` (depth 1),
//! never a question to the user.

use crate::tools::Tool;

/// The agent a `task` call without `agent` runs.
pub const EXPLORE: &str = "explore";

const EXPLORE_PROMPT: &str = include_str!("../prompts/agents/explore.md");

/// Tools no sub-agent is given, whatever its definition lists: `task`
/// (a sub-agent cannot start sub-agents), the questions to the user (the
/// user does not see a sub-agent's conversation) and the session's plan.
pub const NEVER_DELEGATED: [Tool; 4] = [Tool::Task, Tool::AskUser, Tool::ExitPlanMode, Tool::UpdatePlan];

/// One agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// What `task`'s `agent` names it by.
    pub name: String,
    /// One line for the model choosing an agent.
    pub description: String,
    /// The tools it may use (lathe's names, or an MCP tool as
    /// `server__tool`); `None`: every tool the parent has.
    pub tools: Option<Vec<String>>,
    /// A configured model (`[models.<name>]`) it runs on, instead of the parent's.
    pub model: Option<String>,
    /// Its system prompt.
    pub prompt: String,
}

impl AgentSpec {
    /// The built-in explorer.
    pub fn explore() -> AgentSpec {
        AgentSpec {
            name: EXPLORE.to_owned(),
            description: "reads and searches; changes nothing (the default)".to_owned(),
            tools: Some(
                [Tool::ReadFile, Tool::ListDirectory, Tool::Glob, Tool::Grep, Tool::Fetch]
                    .iter()
                    .map(|tool| tool.name().to_owned())
                    .collect(),
            ),
            model: None,
            prompt: EXPLORE_PROMPT.trim().to_owned(),
        }
    }

    /// Whether it may use the tool named `name` (before the parent's
    /// offer and [`NEVER_DELEGATED`] are applied).
    pub fn allows(&self, name: &str) -> bool {
        if NEVER_DELEGATED.iter().any(|tool| tool.name() == name) {
            return false;
        }
        match &self.tools {
            None => true,
            Some(tools) => tools.iter().any(|tool| tool == name),
        }
    }
}

/// The agents of a session, sorted by name (so the `task` tool's
/// description is byte-stable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agents {
    agents: Vec<AgentSpec>,
}

impl Default for Agents {
    fn default() -> Self {
        Agents::builtin()
    }
}

impl Agents {
    /// Only the built-in agents.
    pub fn builtin() -> Agents {
        Agents { agents: vec![AgentSpec::explore()] }
    }

    /// The built-in agents and `defined` ones; an agent defined earlier in
    /// `defined` wins over a later one and over a built-in of its name.
    pub fn with(defined: Vec<AgentSpec>) -> Agents {
        let mut agents: Vec<AgentSpec> = Vec::new();
        for agent in defined.into_iter().chain(Agents::builtin().agents) {
            if !agents.iter().any(|known| known.name == agent.name) {
                agents.push(agent);
            }
        }
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        Agents { agents }
    }

    /// The agent named `name`.
    pub fn get(&self, name: &str) -> Option<&AgentSpec> {
        self.agents.iter().find(|agent| agent.name == name)
    }

    /// Every agent, by name.
    pub fn all(&self) -> &[AgentSpec] {
        &self.agents
    }

    /// Their names, comma-separated (for a message to the model).
    pub fn names(&self) -> String {
        self.agents.iter().map(|agent| agent.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// One line per agent, `- name: description`, as the `task` tool's
    /// description lists them.
    pub fn listing(&self) -> String {
        self.agents
            .iter()
            .map(|agent| format!("- {}: {}", agent.name, agent.description.lines().next().unwrap_or_default().trim()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explore_reads_and_never_delegates() {
        let explore = AgentSpec::explore();
        for allowed in ["read_file", "list_directory", "glob", "grep", "fetch"] {
            assert!(explore.allows(allowed), "{allowed}");
        }
        for refused in ["write_file", "edit_file", "shell", "task", "ask_user", "update_plan"] {
            assert!(!explore.allows(refused), "{refused}");
        }
        let everything = AgentSpec { tools: None, ..AgentSpec::explore() };
        assert!(everything.allows("write_file") && !everything.allows("task"));
    }

    #[test]
    fn defined_agents_are_sorted_and_win_over_built_ins() {
        let mine =
            |name: &str| AgentSpec { name: name.to_owned(), description: format!("{name}'s"), ..AgentSpec::explore() };
        let agents = Agents::with(vec![mine("reviewer"), mine("explore"), mine("reviewer")]);
        assert_eq!(agents.names(), "explore, reviewer");
        assert_eq!(agents.get("explore").unwrap().description, "explore's");
        assert_eq!(agents.listing(), "- explore: explore's\n- reviewer: reviewer's");
    }
}
