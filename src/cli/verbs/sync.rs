//! `offshoot push` and `offshoot pull`: what this workspace holds of its agents sent to,
//! and taken from, one of its remotes (`offshoot remote`).

use serde_json::json;

use crate::cli::{CliError, Ctx};
use crate::engine::remote::{self, RemoteError};

/// Send every agent, config lineage and step record to a remote, each only forward
#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The remote (default: the only one, or `origin`)
    pub remote: Option<String>,
}

/// Take every agent, config lineage and step record a remote has, each only forward
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// The remote (default: the only one, or `origin`)
    pub remote: Option<String>,
}

pub fn error(e: RemoteError) -> CliError {
    match e {
        RemoteError::Unknown(_) | RemoteError::Which(_) | RemoteError::None => CliError::usage(e.to_string()),
        _ => CliError::runtime(e.to_string()),
    }
}

pub fn push(ctx: &Ctx, args: &PushArgs) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let remote = remote::resolve(&ws, args.remote.as_deref()).map_err(error)?;
    let pushed = remote::push(&ws, &remote).map_err(error)?;
    if ctx.out.json {
        ctx.out.event(&json!({"type": "pushed", "remote": remote.name, "sent": pushed.sent,
            "behind": pushed.behind, "refused": pushed.refused.iter().map(|(r, w)| json!({"ref": r, "why": w})).collect::<Vec<_>>()}));
    } else {
        ctx.out.progress(&format!("· sent {} refs to `{}`", pushed.sent.len(), remote.name));
        for name in &pushed.behind {
            ctx.out.progress(&format!(
                "· not sent: `{name}` has moved on `{}` since this workspace last saw it",
                remote.name
            ));
        }
        for (name, why) in &pushed.refused {
            ctx.out.progress(&format!("· refused by `{}`: `{name}`: {why}", remote.name));
        }
    }
    if !pushed.behind.is_empty() {
        return Err(CliError::runtime(format!("{} refs were not sent: the remote has moved on", pushed.behind.len()))
            .hint(format!("`offshoot pull {}` takes what it has, then push again", remote.name)));
    }
    if !pushed.refused.is_empty() {
        return Err(CliError::runtime(format!("`{}` refused {} refs", remote.name, pushed.refused.len())));
    }
    Ok(())
}

pub fn pull(ctx: &Ctx, args: &PullArgs) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let remote = remote::resolve(&ws, args.remote.as_deref()).map_err(error)?;
    let pulled = remote::pull(&ws, &remote, false).map_err(error)?;
    report_pulled(ctx, &remote.name, &pulled);
    Ok(())
}

pub fn report_pulled(ctx: &Ctx, remote: &str, pulled: &remote::Pulled) {
    if ctx.out.json {
        ctx.out.event(&json!({"type": "pulled", "remote": remote, "agents": pulled.agents,
            "lineages": pulled.lineages, "records": pulled.records,
            "kept": pulled.kept.iter().map(|(r, w)| json!({"ref": r, "why": w})).collect::<Vec<_>>()}));
        return;
    }
    ctx.out.progress(&format!(
        "· from `{remote}`: {} agents and {} config lineages new or moved on, {} step records",
        pulled.agents.len(),
        pulled.lineages.len(),
        pulled.records
    ));
    for (name, why) in &pulled.kept {
        ctx.out.progress(&format!("· kept as it is here: `{name}`: {why}"));
    }
}
