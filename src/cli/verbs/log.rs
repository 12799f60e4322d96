use serde_json::json;

use crate::cli::{CliError, Ctx};
use domain::agent;
use domain::id::AgentId;
use domain::transcript::{self, Entry};
use engine::{ops::inspect, step::compaction};
use infra::provider::Block;

/// Show an agent's conversation, tool calls summarised, with each landed compaction
/// where its span ended
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) agent: crate::cli::input::AgentArg,
    /// Keep going: show each entry as it is committed, whoever drives the agent, until
    /// interrupted (Ctrl-C)
    #[arg(long, short = 'f')]
    pub(crate) follow: bool,
    /// Every line of tool calls and results, not their first few
    #[arg(long)]
    pub(crate) full: bool,
}

/// How often `--follow` looks at the agent's branch (a ref read): well within the
/// 200 ms a committed step may take to show.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(40);

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = args.agent.resolve(ctx, &ws)?;
    // Each landed compaction shows where its span ended: before the first entry after
    // the last one it removed.
    let mut landings: Vec<(u32, compaction::Landed)> =
        compaction::landed(&ws, &id)?.into_iter().map(|l| (last_removed_entry(&l.removed), l)).collect();
    landings.sort_by_key(|(at, l)| (*at, l.landing.number));
    let shown_landings = landings.len();
    let mut landings = landings.into_iter().peekable();
    let mut shown = 0;
    // The tip read once: what it holds is shown, and following goes on from it (an
    // entry committed while a long transcript prints is not missed).
    let (tip, entries) = inspect::transcript(&ws, &id)?;
    for entry in entries {
        while let Some((_, landed)) = landings.next_if(|(at, _)| *at < entry.number()) {
            show_landing(ctx, &id, &landed, args.full);
        }
        show_entry(ctx, &entry, args.full);
        shown = entry.number();
    }
    for (_, landed) in landings {
        show_landing(ctx, &id, &landed, args.full);
    }
    if args.follow {
        follow(ctx, &ws, &id, tip, shown, shown_landings, args.full)?;
    }
    Ok(())
}

fn show_entry(ctx: &Ctx, entry: &Entry, full: bool) {
    if ctx.out.json {
        ctx.out.event(&crate::cli::out::entry_json(entry));
    } else {
        ctx.out.line(&render(entry, full));
    }
}

/// Shows what is committed to `id`'s branch from now on, entries after `shown` and
/// landings after the first `landed`, by reading its tip every [`FOLLOW_EVERY`]: the
/// branch is the record, whoever writes it (an attached command, a detached driver, a
/// driver on another terminal). Ends when the agent is removed.
fn follow(
    ctx: &Ctx,
    ws: &engine::store::workspace::Workspace,
    id: &AgentId,
    from: infra::git::CommitId,
    mut shown: u32,
    mut landed: usize,
    full: bool,
) -> Result<(), CliError> {
    let mut loader = engine::store::snapshot::Loader::default();
    let mut seen = Some(from);
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let tip = ws.repo.branch_tip(&id.branch()).map_err(engine::agents::AgentError::from)?;
        let Some(tip) = tip else {
            ctx.out.progress(&format!("· `{id}` was removed"));
            return Ok(());
        };
        if Some(tip) == seen {
            continue;
        }
        seen = Some(tip);
        let ledger = ws.repo.read_file(tip, domain::compaction::LEDGER).map_err(engine::agents::AgentError::from)?;
        let landings = domain::compaction::parse_ledger(&String::from_utf8_lossy(&ledger.unwrap_or_default()));
        if landings.len() > landed {
            for l in compaction::landed(ws, id)?.iter().skip(landed) {
                show_landing(ctx, id, l, full);
            }
            landed = landings.len();
        }
        let entries = loader.entries(&ws.repo, tip).map_err(engine::agents::AgentError::from)?;
        for entry in entries.iter().filter(|e| e.number() > shown) {
            show_entry(ctx, entry, full);
        }
        shown = entries.iter().map(Entry::number).max().unwrap_or(shown).max(shown);
    }
}

/// The highest transcript entry number among removed paths (0 if none).
fn last_removed_entry(removed: &[String]) -> u32 {
    let prefix = format!("{}/", agent::MESSAGES);
    removed
        .iter()
        .filter_map(|p| transcript::parse_name(p.strip_prefix(&prefix)?).ok().map(|(n, _, _)| n))
        .max()
        .unwrap_or(0)
}

fn show_landing(ctx: &Ctx, id: &AgentId, landed: &compaction::Landed, full: bool) {
    let n = landed.landing.number;
    let prefix = format!("{}/", agent::MESSAGES);
    let entries = landed.removed.iter().filter(|p| p.starts_with(&prefix)).count();
    let files = landed.removed.len() - entries;
    if ctx.out.json {
        ctx.out.event(&json!({"side": "compaction", "compaction": n, "compactor": landed.landing.compactor,
            "entries_removed": entries, "files_removed": files, "summary": landed.summary}));
        return;
    }
    ctx.out.line(&format!(
        "══ compaction {n} by `{}`: {entries} entries and {files} files removed (`offshoot show {id} --compaction {n}`)\n{}\n",
        landed.landing.compactor,
        indent(&clip(&landed.summary, if full { usize::MAX } else { 8 }))
    ));
}

fn clip(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    if all.len() <= lines || lines == usize::MAX {
        return text.trim_end().to_owned();
    }
    format!("{}\n… ({} more lines; `--full` shows them)", all[..lines].join("\n"), all.len() - lines)
}

/// An entry as `log` shows it: a header at the margin, then its body indented, so
/// nothing a model, a tool or another agent wrote can pass for a header.
fn render(entry: &Entry, full: bool) -> String {
    let most = |lines: usize| if full { usize::MAX } else { lines };
    match entry {
        Entry::Message { number, sender, text } => {
            let body = text.split_once("\n---\n").map(|(_, b)| b).unwrap_or(text);
            format!("── {number:04} {sender}\n{}\n", indent(body.trim_end()))
        }
        Entry::Output { number, model, output } => {
            let mut body = String::new();
            for b in &output.content {
                match b {
                    Block::Text { text, .. } => body.push_str(&format!("{}\n", text.trim_end())),
                    Block::ToolUse { name, input, .. } => {
                        body.push_str(&format!("→ {name} {}\n", clip(&crate::cli::out::call_gist(input), most(3))));
                    }
                    Block::Thinking { thinking, .. } => {
                        body.push_str(&format!("(thinking: {} chars)\n", thinking.len()))
                    }
                    Block::Opaque { block } => body.push_str(&format!(
                        "(a `{}` block, kept for the provider)\n",
                        block["type"].as_str().unwrap_or("?")
                    )),
                    _ => {}
                }
            }
            format!("── {number:04} {model}\n{}\n", indent(body.trim_end()))
        }
        Entry::ToolResult { number, block } => match block {
            Block::ToolResult { content, is_error, .. } => {
                let mark = if *is_error { "✗" } else { "←" };
                format!("── {number:04} tool {mark}\n{}\n", indent(&clip(content, most(8))))
            }
            _ => String::new(),
        },
    }
}

/// `text` with every line but empty ones indented by two spaces.
fn indent(text: &str) -> String {
    text.lines().map(|l| if l.is_empty() { String::new() } else { format!("  {l}") }).collect::<Vec<_>>().join("\n")
}
