//! Whole-tree budgets: what a tree of agents has spent, from its step records,
//! and whether a limit is reached. Pure: the engine reads the records.

use super::config::{BudgetConfig, Price};
use infra::provider::Usage;

/// One model call as its step record tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSpend {
    pub model: String,
    pub usage: Usage,
    /// Unix seconds the call started and ended (`None`: unknown).
    pub started: Option<u64>,
    pub ended: Option<u64>,
    /// The call asked for tools (the agent was busy until its next step).
    pub tools: bool,
    /// The call was answered (its record says `ok`; a failed or cut call was not).
    pub answered: bool,
    /// The tool calls it asked for that began (each has a record of its own).
    pub tool_calls: u32,
}

/// What a set of steps spent.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Spend {
    /// Model calls made, failed ones included.
    pub(crate) steps: u64,
    /// Prompt plus output tokens; cached prompt tokens are counted once.
    pub tokens: u64,
    /// At the configured prices; `None` when a call's model has no price.
    pub cost_usd: Option<f64>,
    /// Seconds during which at least one agent was in a model call or its tools.
    pub(crate) wall_seconds: u64,
}

/// Prompt plus output tokens of one call (`input` already holds the cached ones).
pub(crate) fn tokens(usage: &Usage) -> u64 {
    usage.input.unwrap_or(0) + usage.output.unwrap_or(0)
}

/// `usd` to the nano-dollar: what is shown and printed as JSON, without the noise sums
/// of binary fractions carry (`0.0039000000000000007`).
pub fn usd(usd: f64) -> f64 {
    (usd * 1e9).round() / 1e9
}

/// The cost of one call in US dollars.
pub fn cost(usage: &Usage, price: &Price) -> f64 {
    let read = usage.cache_read.unwrap_or(0);
    let write = usage.cache_write.unwrap_or(0);
    let fresh = usage.input.unwrap_or(0).saturating_sub(read + write);
    let per_million = fresh as f64 * price.input
        + read as f64 * price.cache_read
        + write as f64 * price.cache_write
        + usage.output.unwrap_or(0) as f64 * price.output;
    per_million / 1_000_000.0
}

/// Sums the steps of several agents, each agent's steps in order. An agent's last
/// step that asked for tools counts as busy until `busy_until` of that agent (its
/// tools are still running) or, when `None`, until the step ended.
pub fn spend<'a>(
    agents: impl IntoIterator<Item = (&'a [StepSpend], Option<u64>)>,
    price: &dyn Fn(&str) -> Option<Price>,
) -> Spend {
    let mut total = Spend { cost_usd: Some(0.0), ..Spend::default() };
    let mut busy = Vec::new();
    for (steps, busy_until) in agents {
        for (i, step) in steps.iter().enumerate() {
            total.steps += 1;
            total.tokens += tokens(&step.usage);
            total.cost_usd = match (total.cost_usd, price(&step.model)) {
                (Some(sum), Some(p)) => Some(sum + cost(&step.usage, &p)),
                _ if tokens(&step.usage) == 0 => total.cost_usd,
                _ => None,
            };
            let Some(start) = step.started else { continue };
            let end = match (step.tools, steps.get(i + 1)) {
                (true, Some(next)) => next.started,
                (true, None) => busy_until.or(step.ended),
                (false, _) => step.ended,
            };
            busy.push((start, end.unwrap_or(start).max(start)));
        }
    }
    total.wall_seconds = union_length(&mut busy);
    total
}

/// The total length of a set of intervals, overlaps counted once.
fn union_length(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut current: Option<(u64, u64)> = None;
    for &(start, end) in intervals.iter() {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    total + current.map(|(s, e)| e - s).unwrap_or(0)
}

/// The limit `spend` has reached, said so that a reader sees the spend: `None` while
/// every set limit has room for another call.
pub fn exhausted(budgets: &BudgetConfig, spend: &Spend) -> Option<String> {
    let mut reached = Vec::new();
    if let Some(max) = budgets.max_cost_usd {
        match spend.cost_usd {
            Some(cost) if cost >= max => reached.push(format!("spent ${cost:.4} of max_cost_usd ${max}")),
            None => reached.push(format!("cannot price its calls for max_cost_usd ${max} (a model has no price)")),
            _ => {}
        }
    }
    if let Some(max) = budgets.max_tokens
        && spend.tokens >= max
    {
        reached.push(format!("used {} tokens of max_tokens {max}", spend.tokens));
    }
    if let Some(max) = budgets.max_steps
        && spend.steps >= max
    {
        reached.push(format!("made {} model calls of max_steps {max}", spend.steps));
    }
    if let Some(max) = budgets.max_wall_seconds
        && spend.wall_seconds >= max
    {
        reached.push(format!("worked {} s of max_wall_seconds {max}", spend.wall_seconds));
    }
    (!reached.is_empty()).then(|| reached.join("; "))
}

/// The next model call at its largest: the model, the prompt tokens it is estimated to
/// send, and the most it may answer (`max_output_tokens`).
#[derive(Debug, Clone, PartialEq)]
pub struct NextCall<'a> {
    pub model: &'a str,
    pub input_tokens: u64,
    pub max_output_tokens: u32,
}

/// The limit the call `next` could take `spend` past, said with the spend and where
/// the call could bring it: `None` while every set limit has room for it at its
/// largest. A cost limit on a model with no price is never passed unknowingly.
pub fn would_pass(budgets: &BudgetConfig, spend: &Spend, next: &NextCall, price: Option<&Price>) -> Option<String> {
    if let Some(reached) = exhausted(budgets, spend) {
        return Some(reached);
    }
    let usage =
        Usage { input: Some(next.input_tokens), output: Some(u64::from(next.max_output_tokens)), ..Usage::default() };
    let mut reached = Vec::new();
    if let (Some(max), Some(spent)) = (budgets.max_cost_usd, spend.cost_usd) {
        match price {
            None => reached.push(format!(
                "cannot price a call to `{}` for max_cost_usd ${max} (it has no price in [prices])",
                next.model
            )),
            Some(price) => {
                // (Prompt tokens written to a cache cost more than fresh input: each is
                // priced at the dearer of the two.)
                let dearest = Price { input: price.input.max(price.cache_write), ..price.clone() };
                let after = usd(spent + cost(&usage, &dearest));
                if after > max {
                    reached.push(format!(
                        "spent ${spent:.4} of max_cost_usd ${max}, and its next call could bring that to ${after:.4}"
                    ));
                }
            }
        }
    }
    if let Some(max) = budgets.max_tokens {
        let after = spend.tokens + tokens(&usage);
        if after > max {
            reached.push(format!(
                "used {} tokens of max_tokens {max}, and its next call could bring that to {after}",
                spend.tokens
            ));
        }
    }
    (!reached.is_empty()).then(|| reached.join("; "))
}

/// For each limit an `exhausted` or `would_pass` text reached, the key and a value that leaves room
/// (twice the limit, or twice the spend when that is more): what `config set` needs.
pub fn raised(reached: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    const KEYS: [&str; 4] = ["max_cost_usd", "max_tokens", "max_steps", "max_wall_seconds"];
    let number = |w: &str| w.trim_start_matches('$').trim_end_matches([',', ';']).parse::<f64>().ok();
    for part in reached.split("; ") {
        let words: Vec<&str> = part.split_whitespace().collect();
        let Some(at) =
            (0..words.len()).find(|&i| words[i] == "of" && words.get(i + 1).is_some_and(|k| KEYS.contains(k)))
        else {
            continue;
        };
        let (Some(key), Some(max)) =
            (KEYS.into_iter().find(|k| *k == words[at + 1]), words.get(at + 2).and_then(|w| number(w)))
        else {
            continue;
        };
        let spent = words[..at].iter().find_map(|w| number(w)).unwrap_or(0.0);
        // Where the next call could bring the spend, when the text says.
        let after = words.iter().rposition(|w| *w == "to").and_then(|i| words.get(i + 1)).and_then(|w| number(w));
        let more = (max * 2.0).max(spent * 2.0).max(after.unwrap_or(0.0) * 2.0);
        // (A cost to the cent, never below one: `0.00` is a limit the config refuses.)
        let cents = |usd: f64| format!("{:.2}", (usd * 100.0).ceil().max(1.0) / 100.0);
        let value = if key == "max_cost_usd" { cents(more) } else { format!("{}", more.ceil() as u64) };
        out.push((key, value));
    }
    out
}

/// Whether the tree's cost is capped (every model it calls then needs a price).
pub fn caps_cost(budgets: &BudgetConfig) -> bool {
    budgets.max_cost_usd.is_some()
}

/// Whether any whole-tree limit is set (otherwise nothing needs reading).
pub fn any_set(budgets: &BudgetConfig) -> bool {
    budgets.max_tokens.is_some()
        || budgets.max_cost_usd.is_some()
        || budgets.max_wall_seconds.is_some()
        || budgets.max_steps.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_are_kept_to_the_nano_dollar_without_binary_noise() {
        assert_eq!((0.1_f64 + 0.2).to_string(), "0.30000000000000004");
        assert_eq!(usd(0.1 + 0.2).to_string(), "0.3");
        assert_eq!(usd(0.0039000000000000007).to_string(), "0.0039");
        assert_eq!(usd(0.000_000_000_4), 0.0);
        assert_eq!(usd(12.345_678_901_2).to_string(), "12.345678901");
    }

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            input: Some(input),
            output: Some(output),
            cache_read: Some(read),
            cache_write: Some(write),
            thinking: None,
        }
    }

    fn step(started: u64, ended: u64, tools: bool, u: Usage) -> StepSpend {
        StepSpend {
            model: "m".into(),
            usage: u,
            started: Some(started),
            ended: Some(ended),
            tools,
            answered: true,
            tool_calls: 0,
        }
    }

    fn sonnet() -> Price {
        Price { input: 3.0, output: 15.0, cache_read: 0.30, cache_write: 3.75 }
    }

    #[test]
    fn cached_tokens_are_counted_once_and_priced_at_their_rate() {
        // 1,000 prompt tokens of which 600 read from and 300 written to the cache.
        let u = usage(1_000, 200, 600, 300);
        assert_eq!(tokens(&u), 1_200);
        let expected = (100.0 * 3.0 + 600.0 * 0.30 + 300.0 * 3.75 + 200.0 * 15.0) / 1e6;
        assert!((cost(&u, &sonnet()) - expected).abs() < 1e-12);
    }

    #[test]
    fn busy_time_is_the_union_of_calls_and_their_tools() {
        // Agent a: a call 100-102 asking for tools, next call at 110 (tools ran 102-110),
        // then 110-111 answering. Agent b: 105-120, overlapping a.
        let a = [step(100, 102, true, usage(10, 1, 0, 0)), step(110, 111, false, usage(10, 1, 0, 0))];
        let b = [step(105, 120, false, usage(10, 1, 0, 0))];
        let s = spend([(&a[..], None), (&b[..], None)], &|_| Some(sonnet()));
        assert_eq!(s.wall_seconds, 20);
        assert_eq!(s.steps, 3);
        assert_eq!(s.tokens, 33);
        // An idle gap is not counted: b again at 200-205.
        let b = [step(105, 120, false, usage(0, 0, 0, 0)), step(200, 205, false, usage(0, 0, 0, 0))];
        assert_eq!(spend([(&a[..], None), (&b[..], None)], &|_| None).wall_seconds, 25);
        // Tools still running count until now.
        let c = [step(100, 101, true, usage(0, 0, 0, 0))];
        assert_eq!(spend([(&c[..], Some(130))], &|_| None).wall_seconds, 30);
    }

    #[test]
    fn an_unpriced_model_makes_the_cost_unknown_and_a_cost_budget_exhausted() {
        let a = [step(1, 2, false, usage(10, 1, 0, 0))];
        let s = spend([(&a[..], None)], &|_| None);
        assert_eq!(s.cost_usd, None);
        let budgets = BudgetConfig { max_cost_usd: Some(1.0), ..BudgetConfig::default() };
        assert!(exhausted(&budgets, &s).is_some_and(|t| t.contains("no price")));
        // A call that used nothing (it failed) costs nothing, priced or not.
        let failed = [step(1, 2, false, Usage::default())];
        assert_eq!(spend([(&failed[..], None)], &|_| None).cost_usd, Some(0.0));
    }

    #[test]
    fn each_limit_is_reached_at_its_value_and_named_with_the_spend() {
        let s = Spend { steps: 5, tokens: 1_000, cost_usd: Some(0.02), wall_seconds: 60 };
        let none = BudgetConfig::default();
        assert_eq!(exhausted(&none, &s), None);
        let under = BudgetConfig {
            max_steps: Some(6),
            max_tokens: Some(1_001),
            max_cost_usd: Some(0.03),
            max_wall_seconds: Some(61),
            ..none.clone()
        };
        assert_eq!(exhausted(&under, &s), None);
        let cost = BudgetConfig { max_cost_usd: Some(0.01), ..none.clone() };
        assert_eq!(exhausted(&cost, &s).as_deref(), Some("spent $0.0200 of max_cost_usd $0.01"));
        let steps = BudgetConfig { max_steps: Some(5), ..none.clone() };
        assert_eq!(exhausted(&steps, &s).as_deref(), Some("made 5 model calls of max_steps 5"));
        let tokens = BudgetConfig { max_tokens: Some(1_000), ..none.clone() };
        assert_eq!(exhausted(&tokens, &s).as_deref(), Some("used 1000 tokens of max_tokens 1000"));
        let wall = BudgetConfig { max_wall_seconds: Some(60), ..none };
        assert_eq!(exhausted(&wall, &s).as_deref(), Some("worked 60 s of max_wall_seconds 60"));
        let both = BudgetConfig { max_steps: Some(5), max_tokens: Some(1000), ..BudgetConfig::default() };
        let text = exhausted(&both, &s).expect("both reached");
        assert_eq!(raised(&text), [("max_tokens", "2000".to_owned()), ("max_steps", "10".to_owned())]);
        // As the driver says it: the tree's root (which may look like a number) first.
        let said = format!("the tree of `234567` {text}");
        assert_eq!(raised(&said), [("max_tokens", "2000".to_owned()), ("max_steps", "10".to_owned())]);
        assert_eq!(raised(&exhausted(&cost, &s).expect("cost")), [("max_cost_usd", "0.04".to_owned())]);
        assert_eq!(raised(&exhausted(&wall, &s).expect("wall")), [("max_wall_seconds", "120".to_owned())]);
        assert!(raised("cannot price its calls for max_cost_usd $1 (a model has no price)").is_empty());
        // A tiny limit is raised to a cent at least, never to `0.00`.
        assert_eq!(raised("spent $0.0012 of max_cost_usd $0.001"), [("max_cost_usd", "0.01".to_owned())]);
    }

    #[test]
    fn the_next_call_is_bounded_at_its_largest_and_an_unpriced_one_is_never_made() {
        let s = Spend { steps: 1, tokens: 200, cost_usd: Some(0.0004), wall_seconds: 1 };
        // 2,000 prompt tokens at $3.75 (a cache write's price, dearer than fresh input's
        // $3) and 100 output at $15 per million: at most $0.009.
        let next = NextCall { model: "sonnet", input_tokens: 2_000, max_output_tokens: 100 };
        let cost = |max: f64| BudgetConfig { max_cost_usd: Some(max), ..BudgetConfig::default() };
        assert_eq!(would_pass(&cost(0.0094), &s, &next, Some(&sonnet())), None);
        let said = would_pass(&cost(0.0093), &s, &next, Some(&sonnet())).expect("past the limit");
        assert_eq!(said, "spent $0.0004 of max_cost_usd $0.0093, and its next call could bring that to $0.0094");
        assert_eq!(raised(&said), [("max_cost_usd", "0.02".to_owned())]);
        let unpriced = would_pass(&cost(5.0), &s, &next, None).expect("refused");
        assert!(unpriced.contains("cannot price a call to `sonnet`"), "{unpriced}");
        let tokens = |max: u64| BudgetConfig { max_tokens: Some(max), ..BudgetConfig::default() };
        assert_eq!(would_pass(&tokens(2_300), &s, &next, None), None);
        let said = would_pass(&tokens(2_299), &s, &next, None).expect("past the limit");
        assert_eq!(said, "used 200 tokens of max_tokens 2299, and its next call could bring that to 2300");
        assert_eq!(raised(&said), [("max_tokens", "4600".to_owned())]);
    }
}
