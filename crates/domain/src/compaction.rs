//! Compaction, the pure parts: the compactor's fixed tools, what it may not
//! nominate, which transcript entries a landing removes, and the ledger of landings
//! an agent's tree keeps (`.offshoot/compactions`).

use super::agent;
use super::config::{CompactionConfig, Trigger};
use super::transcript::{self, Side};

/// Where a compactor keeps the paths it nominated, one per line.
pub const NOMINATED: &str = ".offshoot/nominated";

/// The ledger of landed compactions, one line each: `N <compactor id> <summary path>
/// <the agent's own model calls when it landed> <passes it took>`.
pub const LEDGER: &str = ".offshoot/compactions";

/// Why `path` (relative to the agent's directory, normalised) may not be nominated,
/// if it may not. `own` is whether this pass wrote it; `exists` whether it is there.
pub fn decline(path: &str, own: bool, exists: bool) -> Option<String> {
    let messages = format!("{}/", agent::MESSAGES);
    if let Some(entry) = path.strip_prefix(&messages) {
        let rule = match transcript::parse_name(entry) {
            Ok((1, _, _)) => "the dispatch entry (the agent's opening message) is never deleted",
            Ok((_, "user", Side::User)) => "the user's own messages are kept word for word",
            _ => "transcript entries are not nominated: the landing removes the whole compacted span itself",
        };
        return Some(rule.to_owned());
    }
    if [agent::GOAL, agent::SOUL, agent::FACTS].contains(&path) {
        return Some("it is a system slot file (goal, soul, facts), never deleted".to_owned());
    }
    let harness = format!("{}/", agent::DIR);
    let nominable = [format!("{}/", agent::SUMMARIES), format!("{}/", agent::SKILLS)];
    if (path == agent::DIR || path.starts_with(&harness)) && !nominable.iter().any(|p| path.starts_with(p.as_str())) {
        return Some(
            "it belongs to the harness; of `.offshoot/` only earlier summaries and loaded skills can go".to_owned(),
        );
    }
    if own {
        return Some("this compaction wrote it; an earlier summary may be superseded, never the new one".to_owned());
    }
    if !exists {
        return Some("it does not exist".to_owned());
    }
    None
}

/// The first line of `text` that is a merge-conflict marker, if any.
pub fn conflict_marker(text: &str) -> Option<&str> {
    text.lines().find(|l| l.starts_with("<<<<<<< ") || l.starts_with(">>>>>>> ") || *l == "=======")
}

/// The transcript entries (names under `.offshoot/messages/`) a landing removes from a
/// span: all but the dispatch entry and, with `keep_user`, the user's own messages.
pub fn span_removals<'a>(names: impl IntoIterator<Item = &'a str>, keep_user: bool) -> Vec<String> {
    names
        .into_iter()
        .filter(|name| match transcript::parse_name(name) {
            Ok((1, _, _)) => false,
            Ok((_, "user", Side::User)) => !keep_user,
            Ok(_) => true,
            Err(_) => false,
        })
        .map(str::to_owned)
        .collect()
}

/// One landed compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landing {
    pub number: u32,
    pub compactor: String,
    pub summary: String,
    /// The agent's own model calls (step records) when it landed: `every_n_steps`
    /// counts from here.
    pub steps: u32,
    /// The compactors started since the landing before, this one included (a pass that
    /// lands nothing postpones the next).
    pub passes: u32,
}

/// The ledger's landings, oldest first (lines that do not parse are skipped).
pub fn parse_ledger(text: &str) -> Vec<Landing> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let number = parts.next()?.parse().ok()?;
            let compactor = parts.next()?.to_owned();
            let summary = parts.next()?.to_owned();
            let steps = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let passes = parts.next().and_then(|s| s.parse().ok()).unwrap_or(1);
            Some(Landing { number, compactor, summary, steps, passes })
        })
        .collect()
}

/// The agent's own steps when the last compaction of its own landed (0 before any): a
/// fork inherits its source's ledger, whose landings counted the source's steps, not its.
pub fn own_landed_steps(landings: &[Landing], agent: &str) -> u32 {
    let own = format!("{agent}.");
    landings.iter().rev().find(|l| l.compactor.starts_with(&own)).map_or(0, |l| l.steps)
}

/// The ledger with `landing` appended.
pub fn append_ledger(text: &str, landing: &Landing) -> String {
    let mut out = text.to_owned();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "{} {} {} {} {}\n",
        landing.number, landing.compactor, landing.summary, landing.steps, landing.passes
    ));
    out
}

/// How many of its own steps an agent under a `context_percent` trigger goes on after a
/// pass that landed nothing before another is started.
pub(crate) const RETRY_AFTER_STEPS: u32 = 10;

/// Whether a compaction is due by `config`'s trigger, for an agent that has made
/// `steps` model calls of its own (`since` of them before its last landing; `tried` of
/// them when the last pass since then started, one that has landed nothing) and whose
/// last call reported `input` prompt tokens against a `window`. A pass that lands
/// nothing postpones the next by a whole interval: one compactor per checkpoint.
pub fn due(
    config: &CompactionConfig,
    steps: u32,
    since: u32,
    tried: Option<u32>,
    input: Option<u64>,
    window: Option<u64>,
) -> bool {
    let tried = tried.filter(|t| *t >= since);
    match config.trigger {
        Trigger::Never => false,
        Trigger::EveryNSteps => {
            let from = since.max(tried.unwrap_or(0));
            config.steps.is_some_and(|n| n > 0 && steps.saturating_sub(from) >= n)
        }
        Trigger::ContextPercent => {
            let waited = tried.is_none_or(|t| steps.saturating_sub(t) >= RETRY_AFTER_STEPS);
            match (config.percent, input, window) {
                (Some(percent), Some(input), Some(window)) if window > 0 => {
                    waited && input * 100 >= window * u64::from(percent)
                }
                _ => false,
            }
        }
    }
}

/// The compactor's goal: the branch it compacts and that branch's own goal, quoted.
pub fn goal(agent: &str, name: Option<&str>, agent_goal: &str, focus: Option<&str>) -> String {
    let who = match name {
        Some(name) => format!("`{agent}` ({name})"),
        None => format!("`{agent}`"),
    };
    let quoted: String = agent_goal.lines().map(|l| format!("> {l}\n")).collect();
    let mut text = format!(
        "Compact the conversation of agent {who}, branch `agents/{agent}`, so it can go on with less context. Its goal:\n\n{quoted}\n\
         You have its transcript. Call `write_summary` once with a summary that lets it continue without the \
         entries before this message (they are removed when your summary lands; its opening message and the \
         user's own messages stay). Then call `mark_for_deletion` for each file that no longer earns its place \
         in its context (an earlier summary you carried forward, a spent skill, a superseded work product). \
         End with a short answer saying what you kept and what you dropped.\n"
    );
    if let Some(focus) = focus.filter(|f| !f.trim().is_empty()) {
        text.push_str(&format!("\nFocus the summary on: {}\n", focus.trim()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opening_entry_slot_files_and_harness_internals_are_declined_with_their_rule() {
        let d = |p: &str| decline(p, false, true).unwrap_or_default();
        assert!(d(".offshoot/messages/0001-user.md").contains("dispatch entry"));
        assert!(d(".offshoot/messages/0001-k7q2mx.md").contains("dispatch entry"));
        assert!(d(".offshoot/messages/0007-user.md").contains("user's own messages"));
        assert!(d(".offshoot/messages/0004-tool.json").contains("whole compacted span"));
        for slot in [".offshoot/goal.md", ".offshoot/soul.md", ".offshoot/agent.toml"] {
            assert!(d(slot).contains("system slot"), "{slot}");
        }
        assert!(d(".offshoot/tools/bash.json").contains("belongs to the harness"));
        assert!(d(".offshoot").contains("belongs to the harness"));
        assert!(
            decline(".offshoot/summary/0002.md", true, true).unwrap_or_default().contains("this compaction wrote it")
        );
        assert!(decline("notes/gone.md", false, false).unwrap_or_default().contains("does not exist"));
        // What may go: an earlier summary, a skill, a work product.
        for ok in [".offshoot/summary/0001.md", ".offshoot/skills/old/SKILL.md", "notes/old.md"] {
            assert_eq!(decline(ok, false, true), None, "{ok}");
        }
    }

    #[test]
    fn a_span_loses_everything_but_the_opening_entry_and_the_users_words() {
        let names =
            ["0001-user.md", "0002-m.json", "0003-tool.json", "0004-user.md", "0005-k7q2mx.1.md", "0006-m.json"];
        assert_eq!(span_removals(names, true), ["0002-m.json", "0003-tool.json", "0005-k7q2mx.1.md", "0006-m.json"]);
        assert_eq!(span_removals(names, false).len(), 5);
    }

    #[test]
    fn conflict_markers_are_found_on_their_own_lines_only() {
        assert_eq!(conflict_marker("a\n<<<<<<< HEAD\nb"), Some("<<<<<<< HEAD"));
        assert_eq!(conflict_marker("x\n=======\ny"), Some("======="));
        assert_eq!(conflict_marker("a heading\n=========\n"), None);
        assert_eq!(conflict_marker("see <<<<<<< in git docs"), None);
    }

    #[test]
    fn triggers_count_own_steps_since_the_last_landing_or_read_the_last_input() {
        let every =
            |n| CompactionConfig { trigger: Trigger::EveryNSteps, steps: Some(n), ..CompactionConfig::default() };
        assert!(!due(&every(20), 19, 0, None, None, None));
        assert!(due(&every(20), 20, 0, None, None, None));
        assert!(!due(&every(20), 39, 20, None, None, None));
        assert!(due(&every(20), 40, 20, None, None, None));
        let percent =
            CompactionConfig { trigger: Trigger::ContextPercent, percent: Some(70), ..CompactionConfig::default() };
        assert!(!due(&percent, 5, 0, None, Some(139_999), Some(200_000)));
        assert!(due(&percent, 5, 0, None, Some(140_000), Some(200_000)));
        assert!(!due(&percent, 5, 0, None, None, Some(200_000)), "no call yet: nothing to go by");
        let never = CompactionConfig { trigger: Trigger::Never, ..CompactionConfig::default() };
        assert!(!due(&never, 1_000, 0, None, Some(199_999), Some(200_000)));
    }

    #[test]
    fn a_pass_that_lands_nothing_postpones_the_next_by_a_whole_interval() {
        let every = CompactionConfig { trigger: Trigger::EveryNSteps, steps: Some(10), ..CompactionConfig::default() };
        // Tried at 10, landed nothing: not again before 20.
        assert!(!due(&every, 11, 0, Some(10), None, None));
        assert!(!due(&every, 19, 0, Some(10), None, None));
        assert!(due(&every, 20, 0, Some(10), None, None));
        // A pass from before the last landing counts for nothing.
        assert!(due(&every, 30, 20, Some(12), None, None));
        let percent =
            CompactionConfig { trigger: Trigger::ContextPercent, percent: Some(70), ..CompactionConfig::default() };
        let full = (Some(150_000), Some(200_000));
        assert!(!due(&percent, 12, 0, Some(5), full.0, full.1));
        assert!(due(&percent, 5 + RETRY_AFTER_STEPS, 0, Some(5), full.0, full.1));
        // A pass only postpones (the driver reads its mark only when due without it).
        for (steps, tried) in [(9, Some(3)), (20, Some(12)), (25, None)] {
            assert!(!due(&every, steps, 0, tried, None, None) || due(&every, steps, 0, None, None, None));
        }
    }

    #[test]
    fn the_ledger_reads_what_it_writes() {
        let one = Landing {
            number: 1,
            compactor: "k7q2mx.3".into(),
            summary: ".offshoot/summary/0001.md".into(),
            steps: 9,
            passes: 1,
        };
        let two = Landing {
            number: 2,
            compactor: "k7q2mx.5".into(),
            summary: ".offshoot/summary/0002.md".into(),
            steps: 31,
            passes: 3,
        };
        let text = append_ledger(&append_ledger("", &one), &two);
        assert_eq!(parse_ledger(&text), vec![one.clone(), two.clone()]);
        // Counted from the agent's own landings: a fork's inherited ones count nothing.
        assert_eq!(own_landed_steps(&[one.clone(), two.clone()], "k7q2mx"), 31);
        assert_eq!(own_landed_steps(&[one, two], "k7q2mx.2"), 0);
    }
}
