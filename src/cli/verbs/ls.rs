use crate::cli::{CliError, Ctx};
use engine::ops::inspect;

/// List the agents of the workspace with their state, their own steps, tokens and cost
/// (a fork's inherited history counts for the agent it came from) and how full their
/// context was at their last call (CTX, of the role's window)
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Also the disk each agent takes (its directory, git, records), counted now
    #[arg(long)]
    pub(crate) disk: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let Some(ws) = ctx.existing_workspace()? else {
        ctx.no_workspace();
        return Ok(());
    };
    // Oldest first, as they were made (a child's id sorts under its parent's, not by time).
    let mut states = inspect::states(&ws)?;
    states.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    if ctx.out.json {
        for s in &states {
            let mut line = serde_json::Map::from_iter([("type".to_owned(), "ls".into())]);
            if let serde_json::Value::Object(fields) = serde_json::to_value(s).unwrap_or_default() {
                line.extend(fields);
            }
            if args.disk
                && let Ok(id) = domain::id::AgentId::parse(&s.id)
            {
                line.insert("disk_bytes".into(), inspect::disk_of(&ws, &id).into());
            }
            ctx.out.event(&line.into());
        }
        return Ok(());
    }
    if states.is_empty() {
        ctx.no_agents(&ws);
        return Ok(());
    }
    let width = |of: &dyn Fn(&inspect::AgentState) -> usize, header: &str| {
        states.iter().map(of).max().unwrap_or(0).max(header.len())
    };
    let (wi, wn, wr) = (
        width(&|s| s.id.len(), "ID"),
        width(&|s| s.name.as_deref().unwrap_or("").len(), "NAME"),
        width(&|s| s.role.len(), "ROLE"),
    );
    ctx.out.line(&format!(
        "{:<wi$}  {:<wn$}  {:<wr$}  {:<8} {:>5} {:>9} {:>8} {:>9} {:>4}  {}GOAL",
        "ID",
        "NAME",
        "ROLE",
        "STATE",
        "STEPS",
        "IN",
        "OUT",
        "COST",
        "CTX",
        if args.disk { format!("{:>7}  ", "DISK") } else { String::new() }
    ));
    // Counted now, when asked: a walk of each agent's files.
    let disk = |id: &str| -> String {
        match domain::id::AgentId::parse(id) {
            Ok(id) if args.disk => format!("{:>7}  ", megabytes(inspect::disk_of(&ws, &id))),
            _ => String::new(),
        }
    };
    let unpriced = states.iter().any(|s| s.cost_usd.is_none() && s.steps > 0);
    // On a terminal, a row is cut to its width (the goal ends in `…`); piped, kept whole.
    let columns = std::io::IsTerminal::is_terminal(&std::io::stdout())
        .then(|| ratatui::crossterm::terminal::size().ok())
        .flatten()
        .map(|(cols, _)| usize::from(cols));
    for s in states {
        let row = format!(
            "{:<wi$}  {:<wn$}  {:<wr$}  {:<8} {:>5} {:>9} {:>8} {:>9} {:>4}  {}",
            s.id,
            s.name.as_deref().unwrap_or_default(),
            s.role,
            s.state,
            s.steps,
            infra::words::thousands(s.input_tokens),
            infra::words::thousands(s.output_tokens),
            s.cost_usd.map(|c| format!("${c:.4}")).unwrap_or_else(|| "?".to_owned()),
            s.context_percent().map(|p| format!("{p}%")).unwrap_or_else(|| "-".to_owned()),
            disk(&s.id),
        );
        let room = columns.map_or(usize::MAX, |c| c.saturating_sub(row.chars().count() + 1).max(8));
        let goal = crate::cli::progress::one_line(&s.goal, room);
        ctx.out.line(&format!("{row}{goal}"));
        if let Some(why) = &s.why {
            ctx.out.line(&format!("{:<wi$}  ↳ {}", "", crate::cli::progress::one_line(why, 120)));
        }
        if let Some(worker) = &s.worker {
            ctx.out.line(&format!("{:<wi$}  ↳ driven by worker `{worker}` (as of the last pull)", ""));
        }
    }
    if unpriced {
        ctx.out.progress(
            "· COST `?`: a model of the agent has no price; `offshoot config set prices.<model>.input 3.0 prices.<model>.output 15.0 prices.<model>.cache_read 0.3 prices.<model>.cache_write 3.75` (US dollars per million tokens) prices it",
        );
    }
    Ok(())
}

/// Bytes as `du -h` would say them, in MiB with one decimal (`0.3M`, `41.2M`).
fn megabytes(bytes: u64) -> String {
    format!("{:.1}M", bytes as f64 / 1_048_576.0)
}
