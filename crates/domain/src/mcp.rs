//! MCP servers' tools as the model sees them: names made safe for every provider
//! (`mcp__<server>__<tool>`, `[A-Za-z0-9_-]`, at most 64 characters), the server's
//! allow and deny lists applied, and the record of one server's list that an agent's
//! tree keeps (`.offshoot/mcp/<server>.json`), which requests are built from.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::id::fnv1a;
use infra::provider::ToolSpec;

/// Where an agent's tree keeps the tool lists of its MCP servers, one file each.
pub const DIR: &str = ".offshoot/mcp";

/// What every MCP tool's name starts with.
pub(crate) const PREFIX: &str = "mcp__";

/// The longest tool name every provider takes (OpenAI's and Anthropic's rule).
pub(crate) const MAX_NAME: usize = 64;

/// The path of server `server`'s record in an agent's tree.
pub fn record_path(server: &str) -> String {
    format!("{DIR}/{server}.json")
}

/// One tool of a server, as the server described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Listed {
    pub name: String,
    #[serde(default)]
    pub(crate) description: String,
    pub(crate) input_schema: Value,
    /// The server's `readOnlyHint`: calls of it may run beside other read-only calls.
    #[serde(default)]
    pub(crate) read_only: bool,
}

/// One tool of a server as the agent was given it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offered {
    /// The name the model calls it by.
    pub name: String,
    /// The name the server knows it by.
    pub tool: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

impl Offered {
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
}

/// A server's tools as an agent's tree records them: the list the server gave when
/// the agent's driver last started it, filtered and named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub(crate) server: String,
    pub tools: Vec<Offered>,
    /// The fingerprint of the server's settings when it gave this list
    /// (`McpServer::fingerprint`); none when the record was only narrowed from an earlier
    /// one by new allow and deny lists (the server would not start). A record made under
    /// other settings, narrowed, or empty is listed again when its server starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
}

impl Record {
    /// The record of `listed`, the tools server `server` gave under `config`, after its
    /// allow list (`enabled_tools`, when set) and deny list (`disabled_tools`), in the
    /// server's order.
    pub fn of(server: &str, listed: &[Listed], config: &crate::config::McpServer) -> Record {
        let (enabled, disabled) = (config.enabled_tools.as_deref(), config.disabled_tools.as_slice());
        let kept: Vec<&Listed> = listed
            .iter()
            .filter(|t| enabled.is_none_or(|e| e.contains(&t.name)) && !disabled.contains(&t.name))
            .take(MAX_TOOLS)
            .collect();
        let names = model_names(server, kept.iter().map(|t| t.name.as_str()));
        let tools = kept
            .into_iter()
            .zip(names)
            .map(|(t, name)| Offered {
                name,
                tool: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
                read_only: t.read_only,
            })
            .collect();
        Record { server: server.to_owned(), tools, settings: Some(config.fingerprint()) }
    }

    /// Whether the server listed these tools under settings of fingerprint `settings`
    /// (and listed some: an empty list is asked for again).
    pub fn listed_under(&self, settings: &str) -> bool {
        self.settings.as_deref() == Some(settings) && !self.tools.is_empty()
    }

    /// The recorded tools as the server listed them (those the lists let through).
    pub fn as_listed(&self) -> Vec<Listed> {
        self.tools
            .iter()
            .map(|t| Listed {
                name: t.tool.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
                read_only: t.read_only,
            })
            .collect()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    pub fn parse(bytes: &[u8]) -> Result<Record, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// Which server a model-facing tool name belongs to: the part between `mcp__` and
/// the next `__` (server names never hold `__`).
pub fn server_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PREFIX)?;
    let (server, _) = rest.split_once("__")?;
    (!server.is_empty()).then_some(server)
}

/// The names the model sees for server `server`'s tools `tools`, in their order:
/// `mcp__<server>__<tool>` with every character outside `[A-Za-z0-9_-]` made `_`; a name
/// over 64 characters, or one an earlier tool already took, is cut and ends in `_` and
/// eight hex digits of a hash of the tool's own name, so it stays the same from one
/// listing to the next.
pub(crate) fn model_names<'a>(server: &str, tools: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut taken: Vec<String> = Vec::new();
    for tool in tools {
        let plain = sanitize(&format!("{PREFIX}{server}__{tool}"));
        let mut name = plain.clone();
        let mut salt = 0u32;
        while name.len() > MAX_NAME || taken.contains(&name) {
            let keep = MAX_NAME - 9;
            let cut: String = plain.chars().take(keep).collect();
            let seed = if salt == 0 { tool.to_owned() } else { format!("{tool}\u{0}{salt}") };
            name = format!("{cut}_{:08x}", fnv1a(seed.as_bytes()) as u32);
            salt += 1;
        }
        taken.push(name);
    }
    taken
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// The most tools of one server an agent is offered, and the most tools of a request,
/// built-in ones included (OpenAI takes 128 tools a request; a longer list would also
/// fill the context): a server's first ones, in its order.
pub const MAX_TOOLS: usize = 128;

/// The servers' tools a request offers beside `builtins` built-in tools: the records'
/// tools in order (server by server) while the request holds at most [`MAX_TOOLS`].
pub fn within_request<'a>(builtins: usize, records: impl IntoIterator<Item = &'a Record>) -> Vec<&'a Offered> {
    records.into_iter().flat_map(|r| &r.tools).take(MAX_TOOLS.saturating_sub(builtins)).collect()
}

/// The tools a server listed, read from the `tools` of MCP's `tools/list` result
/// (name, description, inputSchema, annotations.readOnlyHint). A tool no provider
/// would take is left out — no name, or an input schema that is not an object schema
/// — and named in the second list.
pub fn listed_from_wire(tools: &[Value]) -> (Vec<Listed>, Vec<String>) {
    let mut listed = Vec::new();
    let mut refused = Vec::new();
    for t in tools {
        let name = t.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let schema = t.get("inputSchema").cloned().unwrap_or_else(|| serde_json::json!({"type": "object"}));
        if name.is_empty() || schema.get("type").and_then(Value::as_str) != Some("object") {
            refused.push(if name.is_empty() { "(a tool without a name)".to_owned() } else { name });
            continue;
        }
        listed.push(Listed {
            name,
            description: t.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
            input_schema: schema,
            read_only: t.pointer("/annotations/readOnlyHint").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    (listed, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::check_server_name;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn names_are_safe_short_and_distinct() {
        let long = "a".repeat(80);
        let tools = ["search", "get.page", "get page", &long, "über"];
        let names = model_names("docs", tools.iter().copied());
        assert_eq!(names[0], "mcp__docs__search");
        assert_eq!(names[1], "mcp__docs__get_page");
        // `get page` sanitises to the same name: it gets a hash suffix instead.
        assert!(names[2].starts_with("mcp__docs__get_page_") && names[2].len() == 28, "{}", names[2]);
        assert_eq!(names[3].len(), 64);
        assert!(names[3].starts_with("mcp__docs__aaaa"));
        assert_eq!(names[4], "mcp__docs___ber");
        for n in &names {
            assert!(n.len() <= MAX_NAME, "{n}");
            assert!(n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{n}");
            assert_eq!(server_of(n), Some("docs"));
        }
        // The same list gives the same names, whatever came before in other servers.
        assert_eq!(names, model_names("docs", tools.iter().copied()));
    }

    #[test]
    fn server_names_keep_the_separator_unambiguous() {
        assert!(check_server_name("docs-2_x").is_ok());
        assert!(check_server_name("a__b").is_err());
        assert!(check_server_name("a_").is_err() && check_server_name("_a").is_err());
        // Tool names that start with `_` still leave the server's name whole.
        assert_eq!(server_of(&model_names("a", ["_b__t"].into_iter())[0]), Some("a"));
        assert!(check_server_name("a.b").is_err());
        assert!(check_server_name("").is_err());
        assert!(check_server_name(&"s".repeat(33)).is_err());
        assert_eq!(server_of("mcp__a_b__c__d"), Some("a_b"));
        assert_eq!(server_of("bash"), None);
    }

    #[test]
    fn records_filter_and_keep_the_servers_words() {
        let wire = vec![
            json!({"name": "read", "description": "Reads.", "inputSchema": {"type": "object", "properties": {"p": {"type": "string"}}}, "annotations": {"readOnlyHint": true}}),
            json!({"name": "write", "inputSchema": {"type": "object"}}),
            json!({"description": "nameless"}),
            json!({"name": "scalar", "inputSchema": {"type": "string"}}),
        ];
        let (listed, refused) = listed_from_wire(&wire);
        assert_eq!(listed.len(), 2);
        assert_eq!(refused, ["(a tool without a name)", "scalar"]);
        let server = |enabled: Option<Vec<String>>, disabled: Vec<String>| crate::config::McpServer {
            command: Some("fs-server".into()),
            args: Vec::new(),
            env: Default::default(),
            cwd: None,
            url: None,
            headers: Default::default(),
            bearer_token_env_var: None,
            startup_timeout_secs: 10,
            tool_timeout_secs: 60,
            enabled_tools: enabled,
            disabled_tools: disabled,
        };
        let all = Record::of("fs", &listed, &server(None, Vec::new()));
        assert_eq!(all.tools[0].name, "mcp__fs__read");
        assert!(all.tools[0].read_only);
        assert_eq!(all.tools[0].input_schema, wire[0]["inputSchema"]);
        assert_eq!(all.tools[1].description, "");
        let only = Record::of("fs", &listed, &server(Some(vec!["write".to_owned()]), Vec::new()));
        assert!(!only.listed_under(all.settings.as_deref().unwrap_or_default()), "other lists, other settings");
        assert_eq!(only.tools.iter().map(|t| t.tool.as_str()).collect::<Vec<_>>(), ["write"]);
        let denied = Record::of("fs", &listed, &server(None, vec!["write".to_owned()]));
        assert_eq!(denied.tools.iter().map(|t| t.tool.as_str()).collect::<Vec<_>>(), ["read"]);
        assert_eq!(Record::parse(&all.to_bytes()), Ok(all));
    }
}
