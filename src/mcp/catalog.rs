//! MCP tools as the model sees them: namespaced names in the charset every
//! provider accepts, JSON schemas cleaned of what some providers reject,
//! descriptions capped, and the whole list in a fixed order so the tool
//! definitions of a request keep the same bytes until a server's list changes.
//! Pure: no I/O, no MCP connection.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::tool_definition::ToolDefinition;

/// Longest tool name providers accept (`^[a-zA-Z0-9_-]{1,64}$`).
pub(super) const MAX_NAME: usize = 64;

/// Characters of a server's name kept in its tools' names.
const MAX_SERVER_PART: usize = 24;

/// Characters of a tool description the model sees.
pub(super) const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Nesting depth of a schema cleaned; deeper parts are left as they are.
const MAX_SCHEMA_DEPTH: usize = 32;

/// String `format`s kept in schemas. Gemini's OpenAI-compatible endpoint
/// rejects every other one (and OpenAI's strict mode rejects several), so
/// the others move into the description, where they still guide the model.
const KEPT_FORMATS: [&str; 1] = ["date-time"];

/// Where an MCP tool sits: which server (its index in the hub) and its own name there.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    /// The server's index.
    pub server: usize,
    /// The server's name.
    pub server_name: String,
    /// The tool as the server listed it.
    pub tool: rmcp::model::Tool,
}

/// Every MCP tool offered, by the name the model calls it by, and the
/// complete definitions list (built-ins first, then the MCP tools by name).
#[derive(Debug, Clone)]
pub(super) struct Catalog {
    /// What requests offer.
    pub definitions: Arc<[ToolDefinition]>,
    /// The MCP tools by offered name.
    pub entries: HashMap<String, Entry>,
}

impl Catalog {
    /// The built-ins alone.
    pub(super) fn builtins_only(builtins: &[ToolDefinition]) -> Catalog {
        Catalog { definitions: Arc::from(builtins), entries: HashMap::new() }
    }

    /// The catalog for these servers' tools: `(index, server name, tools)`.
    /// Names are given in a fixed order (servers by name, tools by name), so
    /// a collision always resolves the same way.
    pub(super) fn build(builtins: &[ToolDefinition], servers: &[(usize, &str, &[rmcp::model::Tool])]) -> Catalog {
        let mut taken: HashSet<String> = builtins.iter().map(|d| d.name().to_owned()).collect();
        let mut servers: Vec<&(usize, &str, &[rmcp::model::Tool])> = servers.iter().collect();
        servers.sort_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(&b.0)));
        let mut entries = HashMap::new();
        let mut external = Vec::new();
        for (index, server, tools) in servers {
            let mut tools: Vec<&rmcp::model::Tool> = tools.iter().collect();
            tools.sort_by(|a, b| a.name.cmp(&b.name));
            for tool in tools {
                let name = unique(namespaced(server, &tool.name), &mut taken);
                external.push(ToolDefinition::function(&name, description(tool), parameters(&tool.input_schema)));
                entries.insert(name, Entry { server: *index, server_name: (*server).to_owned(), tool: tool.clone() });
            }
        }
        external.sort_by(|a, b| a.name().cmp(b.name()));
        let definitions: Vec<ToolDefinition> = builtins.iter().cloned().chain(external).collect();
        Catalog { definitions: Arc::from(definitions), entries }
    }
}

/// `server__tool` in `[a-zA-Z0-9_-]`, at most 64 characters. A long tool
/// name keeps its start and gains a hash of the whole, so that two long
/// names sharing a start stay apart.
pub(super) fn namespaced(server: &str, tool: &str) -> String {
    let server: String = sanitize(server, "mcp").chars().take(MAX_SERVER_PART).collect();
    let clean_tool = sanitize(tool, "tool");
    let name = format!("{server}__{clean_tool}");
    if name.len() <= MAX_NAME {
        return name;
    }
    let hash = format!("{:08x}", fnv1a(tool.as_bytes()) as u32);
    let room = MAX_NAME - server.len() - 2 - 1 - hash.len();
    // Sanitised names are ASCII, so byte offsets are character offsets.
    format!("{server}__{}_{hash}", &clean_tool[..room.min(clean_tool.len())])
}

/// Every character outside `[a-zA-Z0-9_-]` becomes `_`; an empty name becomes `fallback`.
fn sanitize(name: &str, fallback: &str) -> String {
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    if clean.is_empty() { fallback.to_owned() } else { clean }
}

/// `base`, or `base` with `_2`, `_3`, ... when taken (within 64 characters).
fn unique(base: String, taken: &mut HashSet<String>) -> String {
    if taken.insert(base.clone()) {
        return base;
    }
    (2u32..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = base.len().min(MAX_NAME - suffix.len());
            format!("{}{suffix}", &base[..keep])
        })
        .find(|candidate| taken.insert(candidate.clone()))
        .unwrap_or(base)
}

/// 64-bit FNV-1a: a stable hash (the standard library's may change between
/// releases, and names must not).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

/// What the model reads about a tool: its description (else its title),
/// capped.
pub(super) fn description(tool: &rmcp::model::Tool) -> String {
    let text = match (&tool.description, &tool.title) {
        (Some(description), _) if !description.trim().is_empty() => description.trim().to_owned(),
        (_, Some(title)) => title.trim().to_owned(),
        _ => String::new(),
    };
    cap_chars(&text, MAX_DESCRIPTION_CHARS)
}

/// `text` cut to `max` characters, ending with `…` when cut.
pub(super) fn cap_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A server's input schema as providers accept it. The root becomes a plain
/// object schema (`type: object` with `properties`; the branches of a root
/// `oneOf`/`anyOf`/`allOf` merged into it, since providers reject those at
/// the root), and everywhere: `$schema` and `$id` go, a `format` other than
/// the kept ones moves into the description, a malformed `additionalProperties`
/// or `required` goes. Everything else passes through.
pub(super) fn parameters(schema: &Map<String, Value>) -> Value {
    let mut root = schema.clone();
    match root.get("type") {
        None => {}
        Some(Value::String(kind)) if kind == "object" => {}
        Some(Value::Array(kinds)) if kinds.iter().any(|k| k == "object") => {}
        // Arguments are always an object: a schema for anything else cannot be offered as is.
        Some(_) => {
            let kind = root.get("type").map(ToString::to_string).unwrap_or_default();
            tracing::debug!(%kind, "an MCP tool's schema is not an object schema; offering an open object");
            return json!({"type": "object", "properties": {}});
        }
    }
    root.insert("type".to_owned(), json!("object"));
    merge_root_branches(&mut root);
    for key in ["not", "if", "then", "else"] {
        root.remove(key);
    }
    let mut root = Value::Object(root);
    clean(&mut root, 0);
    if let Value::Object(map) = &mut root
        && !matches!(map.get("properties"), Some(Value::Object(_)))
    {
        map.insert("properties".to_owned(), json!({}));
    }
    root
}

/// Folds `oneOf`/`anyOf`/`allOf` at the root into the root's own
/// `properties`: every branch's properties are offered (the first definition
/// of a name wins); only `allOf` branches add to `required`, since only they
/// all apply.
fn merge_root_branches(root: &mut Map<String, Value>) {
    for key in ["allOf", "oneOf", "anyOf"] {
        let Some(Value::Array(branches)) = root.remove(key) else { continue };
        for branch in branches {
            let Value::Object(branch) = branch else { continue };
            if let Some(Value::Object(properties)) = branch.get("properties") {
                let target = root.entry("properties").or_insert_with(|| json!({}));
                if let Value::Object(target) = target {
                    for (name, property) in properties {
                        target.entry(name.clone()).or_insert_with(|| property.clone());
                    }
                }
            }
            if key == "allOf"
                && let Some(Value::Array(required)) = branch.get("required")
            {
                let target = root.entry("required").or_insert_with(|| json!([]));
                if let Value::Array(target) = target {
                    for name in required {
                        if !target.contains(name) {
                            target.push(name.clone());
                        }
                    }
                }
            }
        }
    }
}

/// Cleans one schema and everything under it (see [`parameters`]).
fn clean(schema: &mut Value, depth: usize) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    let Value::Object(map) = schema else { return };
    map.remove("$schema");
    map.remove("$id");
    match map.get("format") {
        None => {}
        Some(Value::String(format)) if KEPT_FORMATS.contains(&format.as_str()) => {}
        Some(Value::String(format)) => {
            let note = format!("Format: {format}.");
            let format = format.clone();
            map.remove("format");
            let described = match map.get("description") {
                Some(Value::String(text)) if !text.contains(&format) => format!("{} ({note})", text.trim_end()),
                Some(Value::String(text)) => text.clone(),
                _ => note,
            };
            map.insert("description".to_owned(), Value::String(described));
        }
        Some(_) => {
            map.remove("format");
        }
    }
    match map.get_mut("additionalProperties") {
        None | Some(Value::Bool(_)) => {}
        Some(nested @ Value::Object(_)) => clean(nested, depth + 1),
        Some(_) => {
            map.remove("additionalProperties");
        }
    }
    match map.get_mut("required") {
        None => {}
        Some(Value::Array(names)) => names.retain(Value::is_string),
        Some(_) => {
            map.remove("required");
        }
    }
    for key in ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            for child in children.values_mut() {
                clean(child, depth + 1);
            }
        }
    }
    for key in ["items", "prefixItems", "anyOf", "oneOf", "allOf"] {
        match map.get_mut(key) {
            Some(Value::Array(children)) => children.iter_mut().for_each(|child| clean(child, depth + 1)),
            Some(child @ Value::Object(_)) => clean(child, depth + 1),
            _ => {}
        }
    }
    for key in ["not", "if", "then", "else", "contains", "propertyNames", "additionalItems"] {
        if let Some(child) = map.get_mut(key) {
            clean(child, depth + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, schema: Value) -> rmcp::model::Tool {
        let Value::Object(schema) = schema else { panic!("a schema object") };
        rmcp::model::Tool::new(name.to_owned(), format!("The {name} tool."), Arc::new(schema))
    }

    fn schema(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn names_are_namespaced_and_provider_safe() {
        assert_eq!(namespaced("docs", "search"), "docs__search");
        assert_eq!(namespaced("my server", "files/read.v2"), "my_server__files_read_v2");
        assert_eq!(namespaced("", ""), "mcp__tool");
        let long = namespaced("a-very-long-server-name-indeed-yes", &"x".repeat(80));
        assert!(long.len() <= MAX_NAME, "{long}");
        assert!(long.starts_with("a-very-long-server-name-__xxx"), "{long}");
        let other = namespaced("a-very-long-server-name-indeed-yes", &format!("{}y", "x".repeat(79)));
        assert_ne!(long, other, "long names that share a start stay apart");
        for name in [long, other, namespaced("ü", "ß")] {
            assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'), "{name}");
        }
    }

    #[test]
    fn colliding_names_get_numbered_the_same_way_every_time() {
        let tools = [tool("a.b", json!({"type": "object"})), tool("a_b", json!({"type": "object"}))];
        let build = |order: &[(usize, &str, &[rmcp::model::Tool])]| {
            Catalog::build(&[], order).definitions.iter().map(|d| d.name().to_owned()).collect::<Vec<_>>()
        };
        let names = build(&[(0, "s", &tools)]);
        assert_eq!(names, ["s__a_b", "s__a_b_2"]);
        let reversed = [tools[1].clone(), tools[0].clone()];
        assert_eq!(build(&[(0, "s", &reversed)]), names, "listing order does not matter");
        let catalog = Catalog::build(&[], &[(0, "s", &tools)]);
        assert_eq!(catalog.entries["s__a_b"].tool.name, "a.b");
        assert_eq!(catalog.entries["s__a_b_2"].tool.name, "a_b");
    }

    #[test]
    fn builtins_come_first_then_mcp_tools_sorted() {
        let builtins = [ToolDefinition::function("read_file", "r", json!({"type": "object"}))];
        let zeta = [tool("z", json!({})), tool("a", json!({}))];
        let alpha = [tool("m", json!({}))];
        let catalog = Catalog::build(&builtins, &[(0, "zeta", &zeta), (1, "alpha", &alpha)]);
        let names: Vec<&str> = catalog.definitions.iter().map(ToolDefinition::name).collect();
        assert_eq!(names, ["read_file", "alpha__m", "zeta__a", "zeta__z"]);
        assert_eq!(catalog.entries["zeta__a"].server, 0);
        assert_eq!(catalog.entries["alpha__m"].server_name, "alpha");
    }

    #[test]
    fn descriptions_are_capped() {
        let mut long = tool("t", json!({}));
        long.description = Some("d".repeat(5000).into());
        let text = description(&long);
        assert_eq!(text.chars().count(), MAX_DESCRIPTION_CHARS);
        assert!(text.ends_with('…'));
        let mut titled = tool("t", json!({}));
        titled.description = None;
        titled.title = Some("Search the docs".to_owned());
        assert_eq!(description(&titled), "Search the docs");
    }

    #[test]
    fn a_plain_schema_passes_through() {
        let plain = json!({
            "type": "object",
            "properties": {"q": {"type": "string", "description": "Query"}, "when": {"type": "string", "format": "date-time"}},
            "required": ["q"],
            "additionalProperties": false
        });
        assert_eq!(parameters(&schema(plain.clone())), plain);
    }

    #[test]
    fn the_root_becomes_an_object_schema() {
        assert_eq!(parameters(&schema(json!({}))), json!({"type": "object", "properties": {}}));
        assert_eq!(parameters(&schema(json!({"type": "string"}))), json!({"type": "object", "properties": {}}));
        let cleaned = parameters(&schema(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "$id": "urn:x",
            "properties": {"a": {"type": "integer"}}
        })));
        assert_eq!(cleaned, json!({"type": "object", "properties": {"a": {"type": "integer"}}}));
    }

    #[test]
    fn root_branches_are_merged() {
        let cleaned = parameters(&schema(json!({
            "type": "object",
            "oneOf": [
                {"properties": {"id": {"type": "string"}}, "required": ["id"]},
                {"properties": {"name": {"type": "string"}, "id": {"type": "number"}}, "required": ["name"]}
            ],
            "allOf": [{"properties": {"verbose": {"type": "boolean"}}, "required": ["verbose"]}]
        })));
        assert_eq!(
            cleaned,
            json!({
                "type": "object",
                "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "verbose": {"type": "boolean"}},
                "required": ["verbose"]
            })
        );
    }

    #[test]
    fn nested_oddities_are_cleaned() {
        let cleaned = parameters(&schema(json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "format": "uri", "description": "Where"},
                "mail": {"type": "string", "format": "email"},
                "when": {"type": "string", "format": "date-time"},
                "odd": {"type": "string", "format": 7},
                "list": {"type": "array", "items": {"$id": "x", "type": "string", "format": "uuid"}},
                "map": {"type": "object", "additionalProperties": "yes", "required": "all"},
                "typed": {"type": "object", "additionalProperties": {"type": "string", "format": "hostname"}},
                "either": {"anyOf": [{"type": "string", "format": "ipv4"}, {"type": "null"}]}
            },
            "required": ["url", 3],
            "$defs": {"Thing": {"$schema": "x", "type": "string", "format": "byte"}}
        })));
        assert_eq!(
            cleaned,
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "Where (Format: uri.)"},
                    "mail": {"type": "string", "description": "Format: email."},
                    "when": {"type": "string", "format": "date-time"},
                    "odd": {"type": "string"},
                    "list": {"type": "array", "items": {"type": "string", "description": "Format: uuid."}},
                    "map": {"type": "object"},
                    "typed": {"type": "object", "additionalProperties": {"type": "string", "description": "Format: hostname."}},
                    "either": {"anyOf": [{"type": "string", "description": "Format: ipv4."}, {"type": "null"}]}
                },
                "required": ["url"],
                "$defs": {"Thing": {"type": "string", "description": "Format: byte."}}
            })
        );
    }
}
