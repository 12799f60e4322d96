//! The environment tool commands run with: the user's environment without secrets
//! and without anything that points git elsewhere, plus what the harness sets (the
//! agent's git identity, where git stops looking, the agent's private temp dir),
//! adjusted by the config's `[tool_env]`.

use std::path::Path;

use super::config::Config;

/// Parts of a variable name that mark it as a secret (any case). `HEADERS`: headers for
/// a service carry its credentials as often as not (`OTEL_EXPORTER_OTLP_HEADERS` holds a
/// collector's API key).
const SECRET_MARKS: &[&str] = &["KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "HEADERS"];

/// Variables that would point git at another repository, index or identity.
const GIT_VARIABLES: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
];

/// Variables that hand a command a way into the user's agents and sessions (an ssh
/// agent signs with the user's keys; a session bus reaches their keyring).
const AGENT_SOCKETS: &[&str] = &["SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS"];

/// Whether a variable names a socket of the user's (an agent, a bus, a daemon),
/// which commands do not get unless `[tool_env] keep` names it.
pub(crate) fn is_socket_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    AGENT_SOCKETS.contains(&upper.as_str())
        || upper.ends_with("_SOCK")
        || upper.ends_with("_SOCKET")
        || upper == "DOCKER_HOST"
}

/// The PATH a command gets when the user's environment has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Whether a variable's name marks it as a secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKS.iter().any(|m| upper.contains(m))
}

/// Who an agent commits as in its own repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub(crate) name: String,
    pub(crate) email: String,
}

impl Identity {
    /// The config's identity for agents, else the agent's own name at
    /// `offshoot.invalid`.
    pub fn for_agent(config: &Config, agent_name: &str) -> Identity {
        match (&config.git.name, &config.git.email) {
            (Some(name), Some(email)) => Identity { name: name.clone(), email: email.clone() },
            _ => Identity { name: agent_name.to_owned(), email: format!("{agent_name}@offshoot.invalid") },
        }
    }
}

/// What the harness sets for every command of one agent.
pub struct Placement<'a> {
    pub workspace: &'a Path,
    pub agent: &'a str,
    pub identity: &'a Identity,
    /// The agent's private temporary directory.
    pub tmpdir: &'a Path,
}

/// The environment of a tool command: `base` (the user's) without secrets, sockets
/// of the user's agents, git redirections and offshoot's own variables, plus
/// `placement`, then the config's
/// `[tool_env]`: `keep` brings back named variables (never a provider's key),
/// `set` sets values last.
pub fn environment<'b>(
    base: impl IntoIterator<Item = (&'b str, &'b str)>,
    config: &Config,
    placement: &Placement,
) -> Vec<(String, String)> {
    let keys = config.api_key_variables();
    let mut env: Vec<(String, String)> = base
        .into_iter()
        .filter(|(name, _)| {
            let kept = config.tool_env.keep.iter().any(|k| k == name);
            !keys.contains(name)
                && (kept || !(is_secret_name(name) || is_socket_name(name)))
                && !GIT_VARIABLES.contains(name)
                && !name.starts_with("OFFSHOOT_")
        })
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    let workspace = placement.workspace.display().to_string();
    let tmpdir = placement.tmpdir.display().to_string();
    for (k, v) in [
        ("OFFSHOOT_WORKSPACE", workspace.as_str()),
        ("OFFSHOOT_AGENT", placement.agent),
        // Git never looks above the workspace for a repository.
        ("GIT_CEILING_DIRECTORIES", workspace.as_str()),
        ("GIT_AUTHOR_NAME", &placement.identity.name),
        ("GIT_AUTHOR_EMAIL", &placement.identity.email),
        ("GIT_COMMITTER_NAME", &placement.identity.name),
        ("GIT_COMMITTER_EMAIL", &placement.identity.email),
        ("TMPDIR", tmpdir.as_str()),
    ] {
        set(&mut env, k, v);
    }
    for (k, v) in &config.tool_env.set {
        set(&mut env, k, v);
    }
    env.sort();
    env
}

fn set(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    env.retain(|(k, _)| k != name);
    env.push((name.to_owned(), value.to_owned()));
}

/// Values to hide from every tool output and record, with the variable each came
/// from: every provider key, and every other secret-named variable long enough to be
/// a real secret (short values would blot out ordinary text).
pub fn secret_values<'b>(base: impl IntoIterator<Item = (&'b str, &'b str)>, config: &Config) -> Vec<(String, String)> {
    let keys = config.api_key_variables();
    // A key is hidden when it can be a secret (a placeholder such as `test` would be cut
    // out of every ordinary word); any other secret-named variable from eight bytes on,
    // as a password may look like a word. An MCP server's own `env` is judged the same
    // way: it reaches the server, and the agent must not read it back in a result.
    let hidden = |name: &str, value: &str| {
        (keys.contains(&name) && infra::redact::could_be_secret(value)) || (is_secret_name(name) && value.len() >= 8)
    };
    // Values the config sets for tools under secret names are as secret.
    let servers = config.mcp_servers.values().flat_map(|s| s.env.iter()).chain(config.tool_env.set.iter());
    let base: Vec<(&str, &str)> = base.into_iter().collect();
    let mut out: Vec<(String, String)> =
        base.iter().filter(|(k, v)| hidden(k, v)).map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    // Headers in a variable (`OTEL_EXPORTER_OTLP_HEADERS=x-team=KEY,…`): each value is a
    // secret of its own, which a command might print without the rest.
    for (name, value) in base.iter().filter(|(k, _)| k.to_ascii_uppercase().ends_with("HEADERS")) {
        let values = infra::otel::header_values(value).into_iter().filter(|v| v.len() >= 8);
        out.extend(values.map(|v| (format!("{name} value"), v)));
    }
    out.extend(servers.filter(|(k, v)| hidden(k, v)).map(|(k, v)| (k.clone(), v.clone())));
    // An HTTP server's headers and the query of its URL carry credentials as often as
    // not (`X-Api-Key`, `?api_key=`): every value of eight bytes or more is hidden.
    for (name, server) in &config.mcp_servers {
        let headers = server.headers.iter().map(|(header, value)| (format!("{name} header {header}"), value.as_str()));
        let query = server.url.as_deref().and_then(|u| u.split_once('?')).map(|(_, q)| q).unwrap_or_default();
        let params = query.split('&').filter_map(|pair| pair.split_once('=')).map(|(_, v)| (format!("{name} URL"), v));
        out.extend(headers.chain(params).filter(|(_, v)| v.len() >= 8).map(|(k, v)| (k, v.to_owned())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_FILES;
    use pretty_assertions::assert_eq;

    #[test]
    fn each_value_of_a_headers_variable_is_a_secret_of_its_own() {
        let config = Config::parse(DEFAULT_FILES[0].1, &|_| true).expect("config");
        let base = [("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=hcKEYabcdefgh12345,x-short=ab")];
        let hidden: Vec<String> = secret_values(base, &config).into_iter().map(|(_, v)| v).collect();
        assert!(hidden.contains(&"hcKEYabcdefgh12345".to_owned()), "{hidden:?}");
        assert!(!hidden.contains(&"ab".to_owned()), "{hidden:?}");
    }

    #[test]
    fn a_placeholder_key_is_not_a_secret_and_a_short_password_is() {
        let config = Config::parse(DEFAULT_FILES[0].1, &|_| true).expect("config");
        let base =
            [("ANTHROPIC_API_KEY", "test"), ("OPENAI_API_KEY", "sk-proj-a8Fq2Lz9xQ"), ("DB_PASSWORD", "hunter22")];
        let hidden: Vec<String> = secret_values(base, &config).into_iter().map(|(k, _)| k).collect();
        assert_eq!(hidden, ["OPENAI_API_KEY", "DB_PASSWORD"]);
    }

    #[test]
    fn secrets_and_git_redirections_are_removed_and_the_harness_sets_its_own() {
        let text = DEFAULT_FILES[0]
            .1
            .replace("[tool_env]\n", "[tool_env]\nkeep = [\"GITHUB_TOKEN\"]\nset = { EDITOR = \"true\" }\n");
        let config = Config::parse(&text, &|_| true).expect("config");
        let base = [
            ("PATH", "/bin"),
            ("HOME", "/home/u"),
            ("ANTHROPIC_API_KEY", "sk-ant-123456"),
            ("my_password", "hunter2"),
            ("GITHUB_TOKEN", "ghp_kept"),
            ("GIT_DIR", "/elsewhere"),
            ("GIT_AUTHOR_NAME", "The User"),
            ("OFFSHOOT_HOME", "/h"),
            ("LANG", "C.UTF-8"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
            ("DOCKER_HOST", "unix:///var/run/docker.sock"),
        ];
        let identity = Identity::for_agent(&config, "PeachHollow");
        let placement = Placement {
            workspace: Path::new("/ws"),
            agent: "k7q2mx",
            identity: &identity,
            tmpdir: Path::new("/ws/tmp/k7q2mx"),
        };
        let env = environment(base, &config, &placement);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "EDITOR",
                "GITHUB_TOKEN",
                "GIT_AUTHOR_EMAIL",
                "GIT_AUTHOR_NAME",
                "GIT_CEILING_DIRECTORIES",
                "GIT_COMMITTER_EMAIL",
                "GIT_COMMITTER_NAME",
                "HOME",
                "LANG",
                "OFFSHOOT_AGENT",
                "OFFSHOOT_WORKSPACE",
                "PATH",
                "TMPDIR"
            ]
        );
        assert!(env.contains(&("GIT_AUTHOR_EMAIL".into(), "PeachHollow@offshoot.invalid".into())));
        assert!(env.contains(&("GIT_CEILING_DIRECTORIES".into(), "/ws".into())));
        let hidden = secret_values(base, &config);
        assert_eq!(
            hidden,
            vec![("ANTHROPIC_API_KEY".into(), "sk-ant-123456".into()), ("GITHUB_TOKEN".into(), "ghp_kept".into())]
        );
    }

    #[test]
    fn a_configured_identity_replaces_the_agents_own() {
        let text = format!("{}\n[git]\nname = \"Bot\"\nemail = \"bot@example.com\"\n", DEFAULT_FILES[0].1);
        let config = Config::parse(&text, &|_| true).expect("config");
        let id = Identity::for_agent(&config, "PeachHollow");
        assert_eq!(id, Identity { name: "Bot".into(), email: "bot@example.com".into() });
    }
}
