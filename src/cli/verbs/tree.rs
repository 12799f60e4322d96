use std::collections::BTreeMap;

use serde_json::json;

use crate::cli::{CliError, Ctx};
use domain::budget::usd;
use domain::id::AgentId;
use engine::agents;
use engine::ops::inspect::{self, AgentState};

/// Draw the agent tree: each agent's state, role, name, its own steps, tokens and cost,
/// and the totals of every agent below it
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Only this agent (id or name) and the agents below it; all trees when left out
    pub(crate) agent: Option<String>,
    /// Also the disk each agent takes (its directory, git, records), counted now
    #[arg(long)]
    pub(crate) disk: bool,
}

/// Steps, tokens and cost, of one agent or summed over a subtree.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    steps: u64,
    tokens: u64,
    /// `None` when some call's model has no price.
    cost_usd: Option<f64>,
}

impl Totals {
    fn own(s: &AgentState) -> Totals {
        Totals { steps: u64::from(s.steps), tokens: s.input_tokens + s.output_tokens, cost_usd: s.cost_usd }
    }

    fn add(self, other: Totals) -> Totals {
        Totals {
            steps: self.steps + other.steps,
            tokens: self.tokens + other.tokens,
            cost_usd: self.cost_usd.zip(other.cost_usd).map(|(a, b)| a + b),
        }
    }

    fn cost(&self) -> String {
        self.cost_usd.map(|c| format!("${c:.4}")).unwrap_or_else(|| "$?".to_owned())
    }
}

struct Forest<'a> {
    by_id: BTreeMap<&'a str, &'a AgentState>,
    children: BTreeMap<&'a str, Vec<&'a str>>,
    /// Forks by the agent they came from (shown under it, outside its totals: a fork is
    /// a tree of its own).
    forks: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> Forest<'a> {
    fn new(states: &'a [AgentState]) -> Forest<'a> {
        let by_id: BTreeMap<&str, &AgentState> = states.iter().map(|s| (s.id.as_str(), s)).collect();
        let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for s in states {
            if let Some(parent) = s.parent.as_deref().filter(|p| by_id.contains_key(p)) {
                children.entry(parent).or_default().push(s.id.as_str());
            }
        }
        for list in children.values_mut() {
            list.sort_by_key(|id| AgentId::parse(id).ok().and_then(|i| i.child_number()).unwrap_or(0));
        }
        let mut forks: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for s in states {
            if let Some(origin) = s.origin.as_deref().filter(|o| by_id.contains_key(o)) {
                forks.entry(origin).or_default().push(s.id.as_str());
            }
        }
        for list in forks.values_mut() {
            list.sort_by_key(|id| by_id.get(id).map(|s| s.created.clone()));
        }
        Forest { by_id, children, forks }
    }

    fn roots(&self) -> Vec<&'a str> {
        let orphan = |s: &&&AgentState| s.parent.as_deref().is_none_or(|p| !self.by_id.contains_key(p));
        let forked = |s: &&&AgentState| s.origin.as_deref().is_some_and(|o| self.by_id.contains_key(o));
        self.by_id.values().filter(orphan).filter(|s| !forked(s)).map(|s| s.id.as_str()).collect()
    }

    fn forks(&self, id: &str) -> &[&'a str] {
        self.forks.get(id).map(Vec::as_slice).unwrap_or_default()
    }

    fn kids(&self, id: &str) -> &[&'a str] {
        self.children.get(id).map(Vec::as_slice).unwrap_or_default()
    }

    /// Everything below `id`, summed.
    fn below(&self, id: &str) -> Totals {
        let zero = Totals { cost_usd: Some(0.0), ..Totals::default() };
        self.kids(id).iter().fold(zero, |sum, kid| {
            let own = self.by_id.get(kid).map(|s| Totals::own(s)).unwrap_or_default();
            sum.add(own).add(self.below(kid))
        })
    }
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let Some(ws) = ctx.existing_workspace()? else {
        ctx.no_workspace();
        return Ok(());
    };
    let only = args.agent.as_deref().map(|a| agents::resolve(&ws, a)).transpose()?;
    let states = inspect::states(&ws)?;
    let forest = Forest::new(&states);
    let roots = match &only {
        Some(id) => vec![id.as_str()],
        None => forest.roots(),
    };
    if roots.is_empty() {
        ctx.no_agents(&ws);
        return Ok(());
    }
    let disk = |id: &str| -> Option<u64> {
        args.disk.then(|| AgentId::parse(id).ok().map(|id| inspect::disk_of(&ws, &id))).flatten()
    };
    for root in roots {
        draw(ctx, &forest, &disk, root, ("", ""), 0);
    }
    Ok(())
}

/// One agent's line and, below it, its children's, indented with tree glyphs (`lead`
/// before its line, `rest` before its children's).
fn draw(
    ctx: &Ctx,
    forest: &Forest<'_>,
    disk: &dyn Fn(&str) -> Option<u64>,
    id: &str,
    (lead, rest): (&str, &str),
    depth: usize,
) {
    let Some(s) = forest.by_id.get(id) else { return };
    let own = Totals::own(s);
    let kids = forest.kids(id);
    let below = forest.below(id);
    let on_disk = disk(id);
    if ctx.out.json {
        let mut line = json!({
            "type": "tree", "id": s.id, "name": s.name, "role": s.role, "state": s.state, "worker": s.worker, "parent": s.parent,
            "origin": s.origin, "depth": depth,
            "steps": own.steps, "tokens": own.tokens, "cost_usd": own.cost_usd.map(usd),
            "context_tokens": s.context_tokens, "context_window": s.context_window,
            "compactions": s.compactions,
            "tree": {"agents": count(forest, id), "steps": own.steps + below.steps, "tokens": own.tokens + below.tokens,
                     "cost_usd": own.cost_usd.zip(below.cost_usd).map(|(a, b)| usd(a + b))},
        });
        if let Some(bytes) = on_disk {
            line["disk_bytes"] = bytes.into();
        }
        ctx.out.event(&line);
    } else {
        let name = s.name.as_deref().map(|n| format!(" {n}")).unwrap_or_default();
        let subtree = if kids.is_empty() {
            String::new()
        } else {
            let all = own.add(below);
            format!(
                "  · with {} below: {}, {} tokens, {}",
                count(forest, id) - 1,
                infra::words::count(all.steps, "step", "steps"),
                infra::words::thousands(all.tokens),
                all.cost()
            )
        };
        let fill = s.context_percent().map(|p| format!(", context {p}%")).unwrap_or_default();
        // Each landing with the passes it took (a pass that lands nothing postpones the next).
        let compacted = match s.compactions.len() {
            0 => String::new(),
            n => {
                let passes: u32 = s.compactions.iter().sum();
                let passes = match n {
                    1 => infra::words::count(passes, "pass", "passes"),
                    _ => format!("{} passes", s.compactions.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")),
                };
                format!(", {} ({passes})", infra::words::count(n as u64, "compaction", "compactions"))
            }
        };
        let on_disk = on_disk.map(|b| format!(", {:.1} MiB on disk", b as f64 / 1_048_576.0)).unwrap_or_default();
        let state = match &s.worker {
            Some(worker) => format!("{} on worker `{worker}`", s.state),
            None => s.state.to_owned(),
        };
        ctx.out.line(&format!(
            "{lead}{}{name} [{}] {}  {}, {} tokens, {}{fill}{on_disk}{compacted}{subtree}",
            s.id,
            s.role,
            state,
            infra::words::count(own.steps, "step", "steps"),
            infra::words::thousands(own.tokens),
            own.cost()
        ));
    }
    // Its children, then its forks (marked ⑂: trees of their own, forked from it).
    let below: Vec<(&str, bool)> =
        kids.iter().map(|k| (*k, false)).chain(forest.forks(id).iter().map(|f| (*f, true))).collect();
    for (i, (kid, fork)) in below.iter().enumerate() {
        let last = i + 1 == below.len();
        let (branch, next) = if last { ("└─ ", "   ") } else { ("├─ ", "│  ") };
        let mark = if *fork { "⑂ " } else { "" };
        draw(ctx, forest, disk, kid, (&format!("{rest}{branch}{mark}"), &format!("{rest}{next}")), depth + 1);
    }
}

/// How many agents the subtree at `id` holds, itself included.
fn count(forest: &Forest<'_>, id: &str) -> usize {
    1 + forest.kids(id).iter().map(|k| count(forest, k)).sum::<usize>()
}
