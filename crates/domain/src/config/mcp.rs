//! `[mcp_servers.<name>]`: the MCP servers agents may use, and their rules.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Config, ConfigError};

/// One MCP server: a program spoken to over its stdin and stdout (`command`), or a
/// streamable-HTTP endpoint (`url`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// stdio: the program. It runs in the agent's sandbox, like `bash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: the program's arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: variables set for the server, over the tool environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: where the server runs: an absolute path, or one relative to the agent's
    /// directory (default: the agent's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Streamable HTTP: the endpoint (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Streamable HTTP: the environment variable holding a bearer token; the token is
    /// read when the server is reached and never written anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env_var: Option<String>,
    /// Seconds the server may take to start and list its tools (a first `npx` run
    /// downloads the server).
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout_secs: u64,
    /// Seconds one tool call may take.
    #[serde(default = "default_tool_timeout")]
    pub tool_timeout_secs: u64,
    /// Only these of the server's tools are offered (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    /// These of the server's tools are never offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_tools: Vec<String>,
}

/// Seconds a server may take to start, unless its config says otherwise.
pub const STARTUP_TIMEOUT_SECS: u64 = 10;
/// Seconds a call may take, unless the server's config says otherwise.
pub const TOOL_TIMEOUT_SECS: u64 = 60;

fn default_startup_timeout() -> u64 {
    STARTUP_TIMEOUT_SECS
}

fn default_tool_timeout() -> u64 {
    TOOL_TIMEOUT_SECS
}

impl McpServer {
    /// How the server is reached, in words (`stdio` or `http`).
    pub fn transport(&self) -> &'static str {
        if self.url.is_some() { "http" } else { "stdio" }
    }

    /// What the server's list of tools depends on, as a short hash: the program and its
    /// arguments, directory and variables' names, the URL and headers' names, the allow
    /// and deny lists. Values of variables and headers are left out: a hash kept in an
    /// agent's tree must not let anyone test a guess at a secret.
    pub fn fingerprint(&self) -> String {
        let names = |map: &BTreeMap<String, String>| map.keys().cloned().collect::<Vec<_>>();
        let text = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            self.command,
            self.args,
            self.cwd,
            names(&self.env),
            self.url.as_deref().map(|u| u.split('?').next().unwrap_or_default()),
            names(&self.headers),
            self.enabled_tools,
            self.disabled_tools
        );
        format!("{:016x}", crate::id::fnv1a(text.as_bytes()))
    }
}

impl Config {
    /// The MCP servers role `role` uses, by name: those its `mcp_servers` names, every
    /// server when it names none, none for the compactor.
    pub fn mcp_servers_of(&self, role: &str) -> Vec<String> {
        if role == crate::grant::COMPACTOR {
            return Vec::new();
        }
        match self.role(role).and_then(|r| r.mcp_servers.as_ref()) {
            Some(chosen) => chosen.iter().filter(|s| self.mcp_servers.contains_key(*s)).cloned().collect(),
            None => self.mcp_servers.keys().cloned().collect(),
        }
    }

    pub(super) fn validate_mcp(&self, fail: &dyn Fn(String, String) -> ConfigError) -> Result<(), ConfigError> {
        check_servers(&self.mcp_servers, fail)?;
        for (name, role) in &self.roles {
            let Some(chosen) = &role.mcp_servers else { continue };
            let key = format!("roles.{name}.mcp_servers");
            if name == crate::grant::COMPACTOR && !chosen.is_empty() {
                return Err(fail(key, "the compactor never gets MCP servers; leave `mcp_servers` out".into()));
            }
            if let Some(unknown) = chosen.iter().find(|s| !self.mcp_servers.contains_key(*s)) {
                let known: Vec<&str> = self.mcp_servers.keys().map(String::as_str).collect();
                let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                return Err(fail(key, format!("MCP server `{unknown}` is not defined; defined: {known}")));
            }
        }
        Ok(())
    }
}

/// Checks servers by the rules of `[mcp_servers]` (a client's, given for one session, too):
/// `fail` makes the error of a key and its rule.
pub fn check_servers<E>(servers: &BTreeMap<String, McpServer>, fail: &dyn Fn(String, String) -> E) -> Result<(), E> {
    for (name, server) in servers {
        let key = |k: &str| format!("mcp_servers.{name}.{k}");
        check_server_name(name).map_err(|rule| fail(format!("mcp_servers.{name}"), rule))?;
        match (&server.command, &server.url) {
            (Some(_), Some(_)) => {
                return Err(fail(key("url"), "a server has `command` (stdio) or `url` (HTTP), not both".into()));
            }
            (None, None) => {
                return Err(fail(
                    format!("mcp_servers.{name}"),
                    "a server needs `command` (stdio) or `url` (streamable HTTP)".into(),
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(fail(key("command"), "must name a program".into()));
                }
                for (field, set) in [
                    ("headers", !server.headers.is_empty()),
                    ("bearer_token_env_var", server.bearer_token_env_var.is_some()),
                ] {
                    if set {
                        return Err(fail(key(field), "is for HTTP servers (`url`); a stdio server gets `env`".into()));
                    }
                }
            }
            (None, Some(url)) => {
                check_url(url).map_err(|rule| fail(key("url"), rule))?;
                for (header, value) in &server.headers {
                    check_header(header, value).map_err(|rule| fail(key("headers"), rule))?;
                }
                for (field, set) in
                    [("args", !server.args.is_empty()), ("env", !server.env.is_empty()), ("cwd", server.cwd.is_some())]
                {
                    if set {
                        return Err(fail(key(field), "is for stdio servers (`command`)".into()));
                    }
                }
            }
        }
        if let Some(var) = &server.bearer_token_env_var {
            if !is_variable_name(var) {
                return Err(fail(
                    key("bearer_token_env_var"),
                    format!("`{var}` is not an environment variable's name (letters, digits, `_`)"),
                ));
            }
            // A token's variable is withheld from every command: one commands need is not one.
            if ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "PWD"].contains(&var.as_str()) {
                return Err(fail(
                    key("bearer_token_env_var"),
                    format!("`{var}` is not a token's variable: it would be withheld from every command"),
                ));
            }
        }
        if let Some(bad) = server.env.keys().find(|k| !is_variable_name(k)) {
            return Err(fail(key("env"), format!("`{bad}` is not an environment variable's name")));
        }
        for (field, value) in
            [("startup_timeout_secs", server.startup_timeout_secs), ("tool_timeout_secs", server.tool_timeout_secs)]
        {
            if value == 0 {
                return Err(fail(key(field), "must be at least 1".into()));
            }
        }
    }
    Ok(())
}

/// An HTTP(S) URL with a host, nothing a request could not carry, and no credentials
/// (they would be shown by `mcp list` and kept in the config's history).
fn check_url(url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return Err(format!("`{url}` must start with http:// or https://"));
    };
    if let Some(c) = url.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{}` holds {c:?}, which a URL cannot", url.escape_debug()));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "a URL with credentials would be shown and kept in the config's history: use `bearer_token_env_var` or a header"
                .into(),
        );
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Err(format!("`{url}` names no host"));
    }
    Ok(())
}

/// A header HTTP can send: a token for its name, a value without control characters.
fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("`{}` is not a header's name (letters, digits and !#$%&'*+-.^_`|~)", name.escape_debug()));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(format!("the value of header `{name}` holds a control character (a line break?)"));
    }
    Ok(())
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` may name an MCP server: letters, digits, `-` and single `_` (not at
/// either end), at most 32 characters — so the first `__` after `mcp__` always ends the
/// server's name, and no two servers' tools can share a name.
pub fn check_server_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 32 {
        return Err("a server's name has 1 to 32 characters".into());
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
        return Err(format!("`{c}` may not be in a server's name: use letters, digits, `-` and `_`"));
    }
    if name.contains("__") || name.starts_with('_') || name.ends_with('_') {
        return Err(
            "a server's name may not hold `__` nor start or end with `_` (`__` separates server and tool in tool names)"
                .into(),
        );
    }
    Ok(())
}
