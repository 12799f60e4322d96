use crate::cli::{CliError, Ctx};
use crate::cli::{input, progress};
use engine::agents;
use engine::agents::runtime::{Chosen, Woken};

/// Send a message to an agent and wake it (a finished agent continues its branch)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The agent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub(crate) agent: String,
    /// The message (`-` reads it from stdin)
    pub(crate) message: std::ffi::OsString,
    /// Deposit and wake the agent, then return at once
    #[arg(long)]
    pub(crate) detach: bool,
    /// Send it through this remote to whichever worker drives the agent (one handed
    /// over with `prompt --on`)
    #[arg(long, value_name = "REMOTE", conflicts_with = "detach")]
    pub(crate) on: Option<String>,
    #[command(flatten)]
    pub(crate) choice: crate::cli::input::Choice,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    progress::watch_signals(ctx);
    let message = input::text(&args.message, "the message")?;
    if message.trim().is_empty() {
        return Err(CliError::usage("the message is empty"));
    }
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    if let Some(name) = &args.on {
        let remote = engine::fleet::remote::resolve(&ws, Some(name)).map_err(super::sync::error)?;
        let deposit = domain::inbox::Deposit {
            model: args.choice.model.clone(),
            // Its identity wherever it travels: the same words sent twice are two messages.
            key: Some(format!("user:{:08x}{:08x}", engine::random_u32(), engine::random_u32())),
            ..domain::inbox::Deposit::new("user", infra::time::Timestamp::now(), &message)
        };
        engine::fleet::remote::send_to(&ws, &remote, &id, &deposit.render()).map_err(super::sync::error)?;
        if ctx.out.json {
            ctx.out.event(&serde_json::json!({"type": "sent", "agent": id.as_str(), "driver": "remote"}));
        } else {
            ctx.out.progress(&format!(
                "· sent to `{id}` through `{}`; its worker delivers it (a `stop --on` asked before it is delivered holds it for the agent's next message)",
                remote.name
            ));
        }
        return Ok(());
    }
    if engine::fleet::remote::handed(&ws, &id) {
        return Err(CliError::usage(format!("agent `{id}` is driven by the workers of a remote, not here"))
            .hint("`offshoot send --on <remote>` sends it the message there"));
    }
    let rt = ctx.runtime(&ws);
    // (Thinking asked for is checked against the agent's role, read only then.)
    let reasoning = match args.choice.asks_thinking() {
        true => {
            let facts = agents::facts_of(&ws, &id.branch())?;
            args.choice.reasoning(&ws.config(&facts.lineage)?.1, &facts.role)?
        }
        false => None,
    };
    let chosen = Chosen { model: args.choice.model.as_deref(), reasoning: reasoning.as_ref(), mode: None };
    rt.deposit_choosing(&id, "user", &message, &chosen)?;
    if !args.detach {
        // Drives here, or finds the driver that holds the agent and leaves it the message.
        return progress::attach(ctx, &ws, &id, false);
    }
    let woken = rt.wake(&id)?;
    if ctx.out.json {
        let driver = match woken {
            Woken::Running => "running",
            Woken::Launched(_) => "started",
            Woken::Deferred => "deferred",
        };
        ctx.out.event(&serde_json::json!({"type": "sent", "agent": id.as_str(), "driver": driver}));
        return Ok(());
    }
    match woken {
        Woken::Running => ctx.out.progress(&format!("· delivered to `{id}`; its running driver will pick it up")),
        Woken::Launched(_) => ctx.out.progress(&format!("· delivered to `{id}`; a driver started")),
        Woken::Deferred => {
            ctx.out.progress(&format!("· delivered to `{id}`; this workspace's worker starts it once it claims it"))
        }
    }
    Ok(())
}
