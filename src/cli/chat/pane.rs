//! The tree pane's model: every agent in the tree the chat follows, with its state, what
//! it does now, its tokens and cost. Loaded once when the chat follows a tree (what `ls`
//! reads), then kept by the events the agents' drivers write: a frame never rescans the
//! workspace, so a tree of a thousand agents costs a frame what its visible rows cost.

use std::collections::{BTreeMap, HashMap};

use engine::ops::inspect::AgentState;
use engine::step::events::{End, Record};

/// What an agent is doing, as the pane says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// A driver runs it.
    Working,
    /// Nothing is due.
    Done,
    /// Messages wait for a driver.
    Waiting,
    /// The user (or its tree's budget) stopped it.
    Stopped,
    /// It needs the user: its run failed, its budget ran out, or a child's work conflicts.
    NeedsYou,
}

impl State {
    pub(crate) fn word(self) -> &'static str {
        match self {
            State::Working => "working",
            State::Done => "done",
            State::Waiting => "waiting",
            State::Stopped => "stopped",
            State::NeedsYou => "needs you",
        }
    }
}

/// One agent's row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Agent {
    pub(crate) id: String,
    pub(crate) name: Option<String>,
    pub(crate) state: State,
    /// Its current step, call or wait; why it needs the user when it does.
    pub(crate) doing: String,
    pub(crate) step: u32,
    pub(crate) model: String,
    /// Tokens in and out of its own calls, and their cost (`None`: a model without a price).
    pub(crate) tokens: u64,
    pub(crate) cost: Option<f64>,
    /// The prompt tokens of its last call, and its role's context window.
    pub(crate) context: Option<u64>,
    pub(crate) window: Option<u64>,
}

impl Agent {
    /// A row for an agent the tree has not seen yet (just dispatched).
    pub(crate) fn new(id: &str, name: Option<String>) -> Agent {
        Agent {
            id: id.to_owned(),
            name,
            state: State::Waiting,
            doing: String::new(),
            step: 0,
            model: String::new(),
            tokens: 0,
            cost: Some(0.0),
            context: None,
            window: None,
        }
    }

    /// How full its context was at its last call, in whole percent.
    pub(crate) fn context_percent(&self) -> Option<u64> {
        match (self.context, self.window) {
            (Some(tokens), Some(window)) if window > 0 => Some(tokens * 100 / window),
            _ => None,
        }
    }

    /// Its depth below the tree's root.
    pub(crate) fn depth(&self) -> usize {
        self.id.matches('.').count()
    }
}

/// The agents of one tree, in tree order (a parent, then its children by number).
#[derive(Debug, Default)]
pub(crate) struct Tree {
    root: String,
    agents: BTreeMap<Vec<u32>, Agent>,
    keys: HashMap<String, Vec<u32>>,
    /// The row selected in the pane.
    pub(crate) selected: usize,
}

impl Tree {
    /// The tree under `root`, from `states` (what `ls` reads; other agents are left out).
    pub(crate) fn load(root: &str, states: Vec<AgentState>) -> Tree {
        let mut tree = Tree { root: root.to_owned(), ..Tree::default() };
        for s in states {
            let Some(key) = tree.key(&s.id) else { continue };
            let state = match s.state {
                "running" => State::Working,
                "stopped" => State::Stopped,
                "waiting" => State::Waiting,
                "done" => State::Done,
                _ => State::NeedsYou,
            };
            let agent = Agent {
                state,
                doing: if state == State::NeedsYou { s.why.clone().unwrap_or_default() } else { String::new() },
                step: s.steps,
                tokens: s.input_tokens + s.output_tokens,
                cost: s.cost_usd,
                context: s.context_tokens,
                window: s.context_window,
                ..Agent::new(&s.id, s.name.clone())
            };
            // A stop that was the tree's budget is the user's to decide on.
            let agent = match s.why.as_deref() {
                Some(why) if state == State::Stopped && why.starts_with("budget exhausted") => {
                    Agent { state: State::NeedsYou, doing: why.to_owned(), ..agent }
                }
                _ => agent,
            };
            tree.keys.insert(s.id, key.clone());
            tree.agents.insert(key, agent);
        }
        tree
    }

    /// Where `id` sorts in the tree, if it is in it.
    fn key(&self, id: &str) -> Option<Vec<u32>> {
        if id == self.root {
            return Some(Vec::new());
        }
        let below = id.strip_prefix(&self.root)?.strip_prefix('.')?;
        below.split('.').map(|n| n.parse().ok()).collect()
    }

    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.keys.contains_key(id)
    }

    /// Whether `id` belongs in this tree (it may not be known yet).
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.key(id).is_some()
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Agent> {
        self.keys.get(id).and_then(|k| self.agents.get(k))
    }

    /// Adds an agent the tree did not know (one just dispatched, or the root just made).
    pub(crate) fn add(&mut self, agent: Agent) {
        let Some(key) = self.key(&agent.id) else { return };
        self.keys.insert(agent.id.clone(), key.clone());
        self.agents.insert(key, agent);
    }

    pub(crate) fn rows(&self) -> impl Iterator<Item = &Agent> {
        self.agents.values()
    }

    pub(crate) fn len(&self) -> usize {
        self.agents.len()
    }

    /// The agents at work, and those needing the user, below `id` (itself left out).
    pub(crate) fn below(&self, id: &str) -> (usize, usize) {
        let prefix = format!("{id}.");
        let below = self.agents.values().filter(|a| a.id.starts_with(&prefix));
        below.fold((0, 0), |(w, n), a| {
            (w + usize::from(a.state == State::Working), n + usize::from(a.state == State::NeedsYou))
        })
    }

    /// The agents at work.
    pub(crate) fn working(&self) -> impl Iterator<Item = &str> {
        self.agents.values().filter(|a| a.state == State::Working).map(|a| a.id.as_str())
    }

    pub(crate) fn any_working(&self) -> bool {
        self.agents.values().any(|a| a.state == State::Working)
    }

    /// Sets `id`'s state (known or not; nothing outside the tree).
    pub(crate) fn set(&mut self, id: &str, state: State, doing: &str) {
        if let Some(agent) = self.agent_mut(id) {
            agent.state = state;
            agent.doing = doing.to_owned();
        }
    }

    fn agent_mut(&mut self, id: &str) -> Option<&mut Agent> {
        let key = self.keys.get(id)?;
        self.agents.get_mut(key)
    }

    /// What one line of `id`'s events file changes; `true` when it newly needs the user.
    /// An agent not in the tree yet must be [`Tree::add`]ed first.
    pub(crate) fn apply(&mut self, id: &str, record: &Record) -> bool {
        let Some(agent) = self.agent_mut(id) else { return false };
        let before = agent.state;
        match record {
            Record::Delivered { .. } => agent.state = State::Working,
            Record::Step { step, model, .. } => {
                agent.state = State::Working;
                agent.step = *step;
                agent.model = model.clone();
                agent.doing = format!("step {step}");
            }
            Record::ToolCall { name, input, .. } => {
                let gist = crate::cli::out::call_gist(input);
                let gist = gist.split_whitespace().collect::<Vec<_>>().join(" ");
                agent.doing = format!("→ {} {gist}", name.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            Record::ToolResult { .. } => agent.doing = format!("step {}", agent.step),
            Record::Waiting { children } => agent.doing = format!("waiting for {children} below"),
            Record::Usage { usage, cost_usd, .. } => {
                agent.tokens += usage.input.unwrap_or(0) + usage.output.unwrap_or(0);
                agent.cost = match (agent.cost, cost_usd) {
                    (Some(a), Some(b)) => Some(a + b),
                    _ => None,
                };
                agent.context = usage.input.or(agent.context);
            }
            Record::Asked { tool, input, .. } => {
                let gist = crate::cli::out::call_gist(input);
                let gist = gist.split_whitespace().collect::<Vec<_>>().join(" ");
                agent.state = State::NeedsYou;
                agent.doing = format!("waits for your yes: {} {gist}", tool.split_whitespace().collect::<String>());
            }
            Record::Answered { .. } => {
                agent.state = State::Working;
                agent.doing = format!("step {}", agent.step);
            }
            Record::Conflict { child, files } => {
                agent.state = State::NeedsYou;
                agent.doing = format!("`{child}`'s work conflicts in {files} files");
            }
            Record::End(end) => {
                let (state, doing) = match end {
                    End::FinalResponse { .. } => (State::Done, String::new()),
                    End::Busy => return false,
                    End::Interrupted { reason } => (State::Stopped, reason.clone()),
                    End::BudgetExhausted { error } => (State::NeedsYou, format!("budget exhausted: {error}")),
                    End::Error { error, .. } => (State::NeedsYou, format!("failed: {error}")),
                };
                // A conflict said during the run stays to be seen to.
                if !(state == State::Done && before == State::NeedsYou) {
                    agent.state = state;
                    agent.doing = doing;
                }
            }
            _ => {}
        }
        agent.state == State::NeedsYou && before != State::NeedsYou
    }

    /// Moves the selection by `by` rows, within the tree.
    pub(crate) fn select(&mut self, by: isize) {
        let last = self.agents.len().saturating_sub(1);
        self.selected = self.selected.saturating_add_signed(by).min(last);
    }

    pub(crate) fn selected(&self) -> Option<&Agent> {
        self.agents.values().nth(self.selected)
    }

    /// Selects `id`'s row.
    pub(crate) fn select_id(&mut self, id: &str) {
        if let Some(at) = self.agents.values().position(|a| a.id == id) {
            self.selected = at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infra::provider::Usage;

    fn state(id: &str, state: &'static str) -> AgentState {
        AgentState {
            id: id.to_owned(),
            name: None,
            role: "worker".into(),
            state,
            steps: 2,
            model: None,
            input_tokens: 100,
            output_tokens: 10,
            cost_usd: Some(0.5),
            context_tokens: Some(50),
            context_window: Some(200),
            goal: String::new(),
            created: String::new(),
            parent: None,
            origin: None,
            why: (state == "failed").then(|| "boom".to_owned()),
            compactions: Vec::new(),
            worker: None,
        }
    }

    #[test]
    fn a_tree_keeps_its_own_agents_in_tree_order_and_follows_their_events() {
        let states = vec![
            state("ab", "running"),
            state("ab.10", "done"),
            state("ab.2", "failed"),
            state("ab.2.1", "running"),
            state("abc", "running"),
            state("zz.1", "running"),
        ];
        let mut tree = Tree::load("ab", states);
        let order: Vec<&str> = tree.rows().map(|a| a.id.as_str()).collect();
        assert_eq!(order, ["ab", "ab.2", "ab.2.1", "ab.10"], "numbers sort as numbers; other trees left out");
        assert_eq!(tree.get("ab.2").map(|a| (a.state, a.doing.as_str())), Some((State::NeedsYou, "boom")));
        assert_eq!(tree.below("ab"), (1, 1));
        assert!(!tree.holds("abc") && tree.holds("ab.3.4"));

        tree.add(Agent::new("ab.3", Some("Late".into())));
        assert!(!tree.apply("ab.3", &Record::Step { step: 1, provider: "p".into(), model: "m".into() }));
        let usage = Usage { input: Some(70), output: Some(5), ..Usage::default() };
        tree.apply("ab.3", &Record::Usage { step: 1, usage, cost_usd: Some(0.25) });
        let call = Record::ToolCall {
            tool_use_id: "t".into(),
            name: "bash".into(),
            input: serde_json::json!({"command": "ls\n-la"}),
        };
        tree.apply("ab.3", &call);
        let late = tree.get("ab.3").expect("added");
        assert_eq!(
            (late.state, late.doing.as_str(), late.tokens, late.cost),
            (State::Working, "→ bash ls -la", 75, Some(0.25))
        );
        assert_eq!(tree.below("ab"), (2, 1));
        // An end that needs the user says so once; an answer after a conflict keeps it.
        let fail = Record::End(End::Error { error: "no key".into(), cut_off: false });
        assert!(tree.apply("ab.3", &fail));
        assert!(!tree.apply("ab.3", &fail));
        assert!(tree.apply("ab.10", &Record::Conflict { child: "ab.10.1".into(), files: 2 }));
        tree.apply("ab.10", &Record::End(End::FinalResponse { text: "ok".into(), refused: false }));
        assert_eq!(tree.get("ab.10").map(|a| a.state), Some(State::NeedsYou));
        // Events of agents it does not hold change nothing.
        assert!(!tree.apply("zz.1", &fail));
        tree.select(10);
        assert_eq!(tree.selected().map(|a| a.id.as_str()), Some("ab.10"));
        tree.select(-2);
        assert_eq!(tree.selected().map(|a| a.id.as_str()), Some("ab.2.1"));
    }
}
