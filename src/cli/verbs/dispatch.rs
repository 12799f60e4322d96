use serde_json::json;

use crate::cli::{CliError, Ctx, input};
use engine::agents::{self, Child};
use engine::random_u32;
use infra::time::Timestamp;

/// Start a child of an agent on a goal, as its `dispatch` tool would; prints the
/// child's id (its result goes to the parent as a message)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The parent's id or name
    #[arg(add = crate::cli::complete::agents_completer())]
    pub(crate) parent: String,
    /// The child's role
    #[arg(long, default_value = "worker")]
    pub(crate) role: String,
    /// The child's goal (`-` reads it from stdin)
    #[arg(long)]
    pub(crate) goal: std::ffi::OsString,
    /// A unique display name (default: a minted two-word name)
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Fork from this revision instead of the parent's tip (`PeachHollow~2`, a sha, …)
    #[arg(long)]
    pub(crate) from: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let goal = input::text(&args.goal, "the goal")?;
    let ws = ctx.workspace()?;
    let parent = agents::resolve(&ws, &args.parent)?;
    let child = Child {
        key: None,
        role: &args.role,
        goal: &goal,
        name: args.name.as_deref(),
        from: args.from.as_deref(),
        now: Timestamp::now(),
        random: random_u32(),
        env: &ctx.env,
        compactor: false,
    };
    let id = agents::create_child(&ws, &parent, &child)?;
    ctx.runtime(&ws).launch(&id)?;
    let name = agents::name_of(&ws, &id);
    if ctx.out.json {
        ctx.out.event(&json!({"type": "agent", "id": id.as_str(), "name": name, "parent": parent.as_str()}));
    } else {
        ctx.out.progress(&format!(
            "· dispatched `{id}` ({}) for `{parent}`; its result will go to `{parent}`",
            name.unwrap_or_default()
        ));
        ctx.out.line(id.as_str());
    }
    Ok(())
}
