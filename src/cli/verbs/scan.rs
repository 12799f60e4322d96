use crate::cli::{CliError, Ctx};
use engine::ops::scan::{self, Finding, ScanError};

/// Find agents whose driver died with work left (mail undelivered, a call due or cut
/// short, an answer never delivered): relaunch each once; one still dead at the same
/// commit afterwards is reported to its parent with a `died` obituary, once
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(ctx: &Ctx, _args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let found = scan::scan(&ws, &ctx.runtime(&ws))?;
    if found.is_empty() && !ctx.out.json {
        ctx.out.progress("· nothing to do: every agent is running, done, stopped or already reported");
    }
    for f in &found {
        if ctx.out.json {
            ctx.out.event(&serde_json::to_value(f).unwrap_or_default());
            continue;
        }
        ctx.out.line(&match f {
            Finding::Relaunched { agent, why, pid: Some(pid) } => format!("relaunched {agent} ({why}; pid {pid})"),
            Finding::Relaunched { agent, why, pid: None } => format!("relaunched {agent} ({why}; a driver had just started)"),
            Finding::Died { agent, why, told: Some(parent) } => {
                format!("died {agent} ({why}; dead again after a relaunch): its parent {parent} was told")
            }
            Finding::Died { agent, why, told: None } => {
                format!("died {agent} ({why}; dead again after a relaunch): a root, nobody to tell; `offshoot log {agent}` shows why")
            }
            Finding::Fleet { agent, why } => format!(
                "left {agent} to the fleet ({why}): in a worker's workspace only a running `offshoot worker` starts drivers, for the agents it claimed"
            ),
            Finding::Released { agent, name: Some(name) } => {
                format!("released the claims of {agent} ({name}): its maker died before it was made")
            }
            Finding::Released { agent, name: None } => {
                format!("released the claim of {agent}: its maker died before it was made")
            }
        });
    }
    Ok(())
}

impl From<ScanError> for CliError {
    fn from(e: ScanError) -> Self {
        match e {
            ScanError::Agent(a) => a.into(),
            ScanError::Driver(d) => (*d).into(),
            e => CliError::runtime_from(e),
        }
    }
}
