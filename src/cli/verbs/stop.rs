use std::time::Duration;

use serde_json::json;

use crate::cli::{CliError, Ctx};
use engine::agents::lifecycle;
use engine::agents::runtime::Stopped;

/// How long `stop` waits for the driver to settle and let go.
const PATIENCE: Duration = Duration::from_secs(10);

/// Stop an agent and every agent below it: running commands are killed, the calls they
/// cut short are answered, parents are told, and each waits for a message to revive it
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
    /// Ask the workers of this remote to stop it (one handed over with `prompt --on`);
    /// `offshoot pull` then shows it stopped, and `send --on` revives it
    #[arg(long, value_name = "REMOTE")]
    pub(crate) on: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    if let Some(name) = &args.on {
        let remote = engine::fleet::remote::resolve(&ws, Some(name)).map_err(super::sync::error)?;
        let asked = engine::fleet::remote::stop_on(&ws, &remote, &id).map_err(super::sync::error)?;
        if ctx.out.json {
            let agents: Vec<&str> = asked.iter().map(|a| a.as_str()).collect();
            ctx.out.event(&json!({"type": "stop_asked", "remote": remote.name, "agents": agents}));
        } else {
            let below = match asked.len() - 1 {
                0 => String::new(),
                1 => " and the agent below it".to_owned(),
                n => format!(" and the {n} agents below it"),
            };
            let named = args.agent.given().unwrap_or(id.as_str());
            ctx.out.progress(&format!(
                "· asked the workers of `{}` to stop `{named}`{below}; `offshoot pull` brings what they did, `offshoot send --on {} {named} …` revives it",
                remote.name, remote.name
            ));
        }
        return Ok(());
    }
    if engine::fleet::remote::handed(&ws, &id) {
        return Err(CliError::usage(format!("agent `{id}` is driven by the workers of a remote, not here"))
            .hint("`offshoot stop --on <remote>` asks them to stop it"));
    }
    let outcomes = lifecycle::stop_tree(&ws, &ctx.runtime(&ws), &id, PATIENCE)?;
    let mut stuck = Vec::new();
    let mut pids = Vec::new();
    for (agent, outcome) in &outcomes {
        let state = match outcome {
            Stopped::NotRunning => "not-running",
            Stopped::Stopped(_) => "stopped",
            Stopped::Signalled(pid) => {
                stuck.push(format!("`{agent}` (pid {pid})"));
                pids.push((pid.to_string(), agent.to_string()));
                "still-running"
            }
        };
        if ctx.out.json {
            ctx.out.event(&json!({"type": "stop", "agent": agent.as_str(), "outcome": state}));
        } else if let Stopped::Stopped(_) = outcome {
            ctx.out.progress(&format!("· stopped `{agent}`; what it was doing is committed and answered"));
        }
    }
    if !stuck.is_empty() {
        return Err(CliError::runtime(format!(
            "asked {} to stop, but they still hold their agents after {} s",
            stuck.join(", "),
            PATIENCE.as_secs()
        ))
        .hint(format!(
            "`kill -9 {}` ends them at once; then {} settles what was left",
            pids.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>().join(" "),
            pids.iter().map(|(_, a)| format!("`offshoot run {a}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    if !ctx.out.json {
        let running = outcomes.iter().any(|(_, o)| matches!(o, Stopped::Stopped(_)));
        let marked = ws.repo.mark(lifecycle::STOPPED, id.as_str()).ok().flatten().is_some();
        if !running && !marked {
            ctx.out.progress(&format!("· `{id}` is not running and has nothing left to do; nothing to stop"));
        } else if !running {
            ctx.out.progress(&format!(
                "· `{id}` is not running; nothing to stop (it stays stopped until a message or `offshoot run`)"
            ));
        } else {
            ctx.out.progress(&format!("· `offshoot run {id}` or a message continues it"));
        }
    }
    Ok(())
}
