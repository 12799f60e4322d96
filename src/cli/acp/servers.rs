//! The MCP servers an editor passes with a session, as offshoot's own (`[mcp_servers]`
//! entries): a stdio server's command, arguments and environment, an HTTP server's URL
//! and headers. They are the session's agent's, beside its role's, and run contained as
//! configured ones do.

use std::collections::BTreeMap;

use agent_client_protocol::v1::schema::McpServer;
use serde_json::json;

/// The servers as offshoot's, by a name made safe for tool names; what cannot be taken
/// (SSE, which offshoot does not speak) is said on stderr, the editor's log of the agent.
pub(super) fn taken(servers: &[McpServer]) -> BTreeMap<String, domain::config::McpServer> {
    let mut out = BTreeMap::new();
    for server in servers {
        let (name, value) = match server {
            McpServer::Stdio(s) => {
                let env: BTreeMap<&str, &str> = s.env.iter().map(|v| (v.name.as_str(), v.value.as_str())).collect();
                (&s.name, json!({"command": s.command, "args": s.args, "env": env}))
            }
            McpServer::Http(s) => {
                let headers: BTreeMap<&str, &str> =
                    s.headers.iter().map(|h| (h.name.as_str(), h.value.as_str())).collect();
                (&s.name, json!({"url": s.url, "headers": headers}))
            }
            McpServer::Sse(s) => {
                super::log(&format!("MCP server `{}` speaks SSE, which offshoot does not: not used", s.name));
                continue;
            }
            _ => continue,
        };
        match serde_json::from_value(value) {
            Ok(server) => {
                out.insert(safe_name(name), server);
            }
            Err(e) => super::log(&format!("MCP server `{name}` is not used: {e}")),
        }
    }
    out
}

/// `name` with every character a tool name may not hold made `_` (and `__`, which
/// separates a server from its tool, made one).
fn safe_name(name: &str) -> String {
    let mut safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    while safe.contains("__") {
        safe = safe.replace("__", "_");
    }
    let safe: String = safe.trim_matches('_').chars().take(32).collect();
    let safe = safe.trim_end_matches('_');
    if safe.is_empty() { "editor".to_owned() } else { safe.to_owned() }
}
