use serde_json::json;

use super::config::Lineage;
use crate::cli::{CliError, Ctx};
use domain::config::{McpServer, STARTUP_TIMEOUT_SECS, TOOL_TIMEOUT_SECS};
use engine::step::mcp::{self as servers, NewServer};

/// Add, list, remove and look into the MCP servers whose tools agents use (each
/// change is a commit on the config lineage)
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Args {
    /// Add a server: `mcp add NAME -- COMMAND [ARGS…]` (stdio, run in the agent's
    /// sandbox) or `mcp add NAME --url URL` (streamable HTTP)
    Add(AddArgs),
    /// List the servers: transport, what runs or is reached, and how each last started
    List(Lineage),
    /// Remove a server (and its name from every role's `mcp_servers`)
    Remove {
        /// The server
        name: String,
        #[command(flatten)]
        lineage: Lineage,
    },
    /// Start a server now and print each tool as the model would see it: its name,
    /// description and input schema
    Tools {
        /// The server
        name: String,
        #[command(flatten)]
        lineage: Lineage,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The server's name: tools appear as `mcp__<name>__<tool>`
    pub(crate) name: String,
    /// A streamable-HTTP endpoint instead of a command
    #[arg(long, conflicts_with_all = ["command", "env", "cwd"])]
    pub(crate) url: Option<String>,
    /// HTTP: a header sent with every request, `NAME=VALUE` (repeatable)
    #[arg(long = "header", value_name = "NAME=VALUE", requires = "url")]
    pub(crate) headers: Vec<String>,
    /// HTTP: the environment variable holding a bearer token (read when the server is
    /// reached, never stored)
    #[arg(long, value_name = "VAR", requires = "url")]
    pub(crate) bearer_token_env_var: Option<String>,
    /// stdio: a variable for the server, `NAME=VALUE` (repeatable)
    #[arg(long, value_name = "NAME=VALUE")]
    pub(crate) env: Vec<String>,
    /// stdio: where the server runs (relative to the agent's directory, or absolute)
    #[arg(long)]
    pub(crate) cwd: Option<String>,
    /// Seconds the server may take to start and list its tools
    #[arg(long, value_name = "SECS", default_value_t = STARTUP_TIMEOUT_SECS)]
    pub(crate) startup_timeout: u64,
    /// Seconds one call may take
    #[arg(long, value_name = "SECS", default_value_t = TOOL_TIMEOUT_SECS)]
    pub(crate) tool_timeout: u64,
    #[command(flatten)]
    pub(crate) lineage: Lineage,
    /// stdio: the program and its arguments, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<String>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    match args {
        Args::Add(add) => {
            let server = server_of(add)?;
            let ws = ctx.workspace_making()?;
            let set = servers::add(&ws, &add.lineage.lineage, &NewServer { name: &add.name, server: &server })?;
            let what = format!("added MCP server `{}`", add.name);
            said(ctx, &add.lineage.lineage, set.commit, &what, "agents use it from their next step");
            Ok(())
        }
        Args::List(lineage) => list(ctx, &lineage.lineage),
        Args::Remove { name, lineage } => {
            let ws = ctx.workspace()?;
            let (_, config) = ws.config(&lineage.lineage)?;
            if !config.mcp_servers.contains_key(name) {
                return Err(not_configured(name, &config));
            }
            let (set, roles) = servers::remove(&ws, &lineage.lineage, name)?;
            for role in &roles {
                ctx.out.progress(&format!("· role `{role}` no longer names it in `mcp_servers`"));
            }
            let what = format!("removed MCP server `{name}`");
            said(ctx, &lineage.lineage, set.commit, &what, "agents stop using it at their next step");
            Ok(())
        }
        Args::Tools { name, lineage } => {
            let ws = ctx.workspace()?;
            let (_, config) = ws.config(&lineage.lineage)?;
            if !config.mcp_servers.contains_key(name) {
                return Err(not_configured(name, &config));
            }
            let record = servers::probe(&ws, &config, name, &ctx.runtime(&ws)).map_err(CliError::runtime_cause)?;
            for tool in &record.tools {
                if ctx.out.json {
                    ctx.out.event(&json!({"type": "mcp_tool", "name": tool.name, "tool": tool.tool, "description": tool.description,
                        "input_schema": tool.input_schema, "read_only": tool.read_only}));
                } else {
                    let schema = serde_json::to_string_pretty(&tool.input_schema).unwrap_or_default();
                    let read_only = if tool.read_only { " (read-only)" } else { "" };
                    ctx.out.line(&format!(
                        "{}{read_only}\n  {}\n  input: {}\n",
                        tool.name,
                        tool.description.trim().replace('\n', "\n  "),
                        schema.replace('\n', "\n  ")
                    ));
                }
            }
            if !ctx.out.json {
                ctx.out.progress(&format!("· MCP server `{name}` offers {} tools", record.tools.len()));
            }
            Ok(())
        }
    }
}

/// The server `mcp add` describes, checked for what the flags alone can tell.
fn server_of(add: &AddArgs) -> Result<McpServer, CliError> {
    domain::config::check_server_name(&add.name)
        .map_err(|rule| CliError::usage(format!("`{}` cannot name an MCP server: {rule}", add.name)))?;
    let pairs = |flag: &str, values: &[String]| {
        values
            .iter()
            .map(|v| match v.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                _ => Err(CliError::usage(format!("`--{flag} {v}` is not NAME=VALUE"))),
            })
            .collect::<Result<std::collections::BTreeMap<_, _>, _>>()
    };
    if add.url.is_none() && add.command.is_empty() {
        return Err(CliError::usage(format!("MCP server `{}` needs a command or a URL", add.name))
            .hint(format!("`offshoot mcp add {} -- npx -y some-server`, or `--url https://…`", add.name)));
    }
    let (command, args) = match add.command.split_first() {
        Some((program, args)) => (Some(program.clone()), args.to_vec()),
        None => (None, Vec::new()),
    };
    Ok(McpServer {
        command,
        args,
        env: pairs("env", &add.env)?,
        cwd: add.cwd.clone(),
        url: add.url.clone(),
        headers: pairs("header", &add.headers)?,
        bearer_token_env_var: add.bearer_token_env_var.clone(),
        startup_timeout_secs: add.startup_timeout,
        tool_timeout_secs: add.tool_timeout,
        enabled_tools: None,
        disabled_tools: Vec::new(),
    })
}

fn list(ctx: &Ctx, lineage: &str) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let (_, config) = ws.config(lineage)?;
    let starts = servers::last_starts(&ws.layout.root().join("mcp"));
    if config.mcp_servers.is_empty() && !ctx.out.json {
        ctx.out.progress("· no MCP servers; `offshoot mcp add NAME -- COMMAND` adds one");
    }
    for (name, server) in &config.mcp_servers {
        let target = match (&server.url, &server.command) {
            (Some(url), _) => url.clone(),
            (None, command) => std::iter::once(command.clone().unwrap_or_default())
                .chain(server.args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
        };
        let last = starts.get(name);
        if ctx.out.json {
            ctx.out
                .event(&json!({"type": "mcp_server", "name": name, "transport": server.transport(), "target": target,
                "last_start": last}));
            continue;
        }
        let state = match last {
            None => "not started yet".to_owned(),
            Some(n) if n.state.ok => format!("started {} for {}: {} tools", n.at, n.agent, n.state.tools),
            Some(n) => format!("failed {} for {}: {}", n.at, n.agent, n.state.error.as_deref().unwrap_or("")),
        };
        ctx.out.line(&format!("{name}\t{}\t{target}\t{state}", server.transport()));
    }
    Ok(())
}

fn not_configured(name: &str, config: &domain::config::Config) -> CliError {
    let known: Vec<&str> = config.mcp_servers.keys().map(String::as_str).collect();
    let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
    CliError::usage(format!("MCP server `{name}` is not configured")).hint(format!("configured: {known}"))
}

/// What a change did: the commit in the progress line (`--json` gives it to scripts).
fn said(ctx: &Ctx, lineage: &str, commit: Option<infra::git::CommitId>, what: &str, then: &str) {
    if ctx.out.json {
        let commit = commit.map(|c| c.to_string());
        ctx.out.event(&json!({"lineage": lineage, "commit": commit, "changed": commit.is_some()}));
        return;
    }
    let commit = commit.map(|c| format!(", commit {}", &c.to_string()[..12])).unwrap_or_default();
    ctx.out.progress(&format!("· {what} (config/{lineage}{commit}); {then}"));
}
