//! `pending`, `approve` and `deny`: the attention queue from the command line.

use serde_json::json;

use crate::cli::{CliError, Ctx};
use domain::question::Scope;
use engine::ops::approvals::{self, ApprovalError};
use engine::store::queue::{Entry, QueueError};

/// List the questions agents wait on, oldest first: which agents ask, what would run,
/// and why it needs a yes
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Say yes to a question: every call waiting on it runs
#[derive(Debug, clap::Args)]
pub(crate) struct ApproveArgs {
    /// The question's id (from `offshoot pending`; a prefix of one will do)
    pub(crate) id: String,
    /// Also yes to the same call from any agent of the askers' trees, from now on
    #[arg(long, conflicts_with = "always")]
    pub(crate) for_tree: bool,
    /// Also write an allow rule for this exact call into the config (a commit saying
    /// who, when and from which question)
    #[arg(long)]
    pub(crate) always: bool,
}

/// Say no to a question: every call waiting on it is refused, and the model is told
#[derive(Debug, clap::Args)]
pub(crate) struct DenyArgs {
    /// The question's id (from `offshoot pending`; a prefix of one will do)
    pub(crate) id: String,
    /// Why, for the model to read
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

pub(crate) fn run(ctx: &Ctx, _args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let entries = approvals::pending(&ws);
    if ctx.out.json {
        for e in &entries {
            ctx.out.event(&json!({"type": "question", "question": e}));
        }
        return Ok(());
    }
    if entries.is_empty() {
        ctx.out.line("no questions wait for an answer");
        return Ok(());
    }
    for e in &entries {
        ctx.out.line(&describe(e));
    }
    ctx.out.progress("· answer with `offshoot approve ID` (`--for-tree`, `--always`) or `offshoot deny ID --reason …`");
    Ok(())
}

/// An entry in a few lines: its id, who waits, what would run, and why.
pub(crate) fn describe(e: &Entry) -> String {
    let q = &e.asked.question;
    let who: Vec<String> = e
        .waiters
        .iter()
        .map(|w| match &w.branch {
            Some(b) => format!("{b} ({})", w.agent),
            None => w.agent.clone(),
        })
        .collect();
    let who = match who.as_slice() {
        [one] => one.clone(),
        many => format!("{} agents: {}", many.len(), many.join(", ")),
    };
    // Whole and escaped: what is approved is what is shown, every field of it.
    let literal = crate::cli::out::literal;
    let input = match q.input.as_object() {
        Some(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k} = {}", literal(&v.as_str().map_or_else(|| v.to_string(), str::to_owned))))
            .collect::<Vec<_>>()
            .join(", "),
        None => literal(&q.input.to_string()),
    };
    let escalation = q.escalation.map(|e| format!(" [{}]", e.word())).unwrap_or_default();
    format!(
        "{}  asked {}\n  by    {who}\n  runs  {}: {input}{escalation}\n  why   {}",
        e.id,
        e.asked.at,
        crate::cli::progress::one_line(&q.tool, 80),
        literal(&q.why)
    )
}

pub(crate) fn approve(ctx: &Ctx, args: &ApproveArgs) -> Result<(), CliError> {
    let scope = match (args.for_tree, args.always) {
        (true, _) => Scope::ForTree,
        (_, true) => Scope::Always,
        _ => Scope::Once,
    };
    answer(ctx, &args.id, true, scope, None)
}

pub(crate) fn deny(ctx: &Ctx, args: &DenyArgs) -> Result<(), CliError> {
    answer(ctx, &args.id, false, Scope::Once, args.reason.clone())
}

fn answer(ctx: &Ctx, id: &str, yes: bool, scope: Scope, reason: Option<String>) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let entry = approvals::answer(&ws, id, yes, scope, reason).map_err(error)?;
    if ctx.out.json {
        ctx.out.event(&json!({"type": "answered", "question": entry}));
        return Ok(());
    }
    let word = if yes { "yes" } else { "no" };
    let waiting = match entry.waiters.len() {
        1 => "the call waiting on it".to_owned(),
        n => format!("the {n} calls waiting on it"),
    };
    let scope = match scope {
        Scope::Once => String::new(),
        Scope::ForTree => "; the same call from their trees runs without asking from now on".to_owned(),
        Scope::Always => format!(
            "; the rule `{}` is in `permissions.allow` from now on",
            entry.asked.question.rule.as_deref().unwrap_or_default()
        ),
    };
    ctx.out.line(&format!("{word} to {}: {waiting} go on{scope}", entry.id));
    Ok(())
}

fn error(e: ApprovalError) -> CliError {
    match e {
        ApprovalError::Queue(QueueError::Io { .. }) | ApprovalError::Config { .. } => CliError::runtime_from(e),
        e @ ApprovalError::Queue(QueueError::Unknown(_)) => {
            CliError::usage_from(e).hint("`offshoot pending` lists the questions waiting")
        }
        e => CliError::usage_from(e),
    }
}
