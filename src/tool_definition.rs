//! What a tool offers the model: its name, what it does, and the JSON Schema
//! of its parameters.
//!
//! Plain data, between the modules that make definitions (the built-in
//! `tools`, `mcp` for a server's tools) and the one that sends them
//! (`model`, which writes them in the wire's function-tool shape: see
//! `model::wire`). It knows neither side.

/// A function tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    name: String,
    description: String,
    parameters: serde_json::Value,
}

impl ToolDefinition {
    /// A function tool with a JSON Schema for its parameters.
    pub fn function(name: impl Into<String>, description: impl Into<String>, parameters: serde_json::Value) -> Self {
        Self { name: name.into(), description: description.into(), parameters }
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the tool does, as the model reads it.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The JSON Schema of the tool's arguments.
    pub fn parameters(&self) -> &serde_json::Value {
        &self.parameters
    }
}
