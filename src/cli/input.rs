//! Message text from the command line: an argument, or `-` for standard input (a goal
//! of megabytes does not fit in argv). Text must be UTF-8; anything else is refused
//! here, naming where it came from.

use std::ffi::OsStr;
use std::io::Read;

use super::CliError;

/// The text `arg` stands for: itself, or all of standard input when it is `-`. `what`
/// names it in errors ("the message", "the goal").
pub(crate) fn text(arg: &OsStr, what: &str) -> Result<String, CliError> {
    if arg == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map_err(|e| CliError::runtime(format!("cannot read {what} from standard input: {e}")))?;
        return String::from_utf8(bytes).map_err(|e| {
            CliError::usage(format!(
                "{what} read from standard input is not UTF-8 text (the bytes at offset {} are not)",
                e.utf8_error().valid_up_to()
            ))
        });
    }
    arg.to_str().map(str::to_owned).ok_or_else(|| {
        CliError::usage(format!("{what} is not UTF-8 text")).hint("write it as UTF-8, or pass `-` and pipe it in")
    })
}

/// What the user chooses for one agent in place of its role's: `--model`, `--thinking`,
/// `--effort` (on `prompt`, `send` and `fork`; recorded in the agent's tree from the
/// message they come with on).
#[derive(Debug, clap::Args)]
pub(crate) struct Choice {
    /// The model to use in place of the role's (recorded in the agent's tree as
    /// `.offshoot/model`; a fork without one keeps its origin's)
    #[arg(long, value_parser = model_name)]
    pub(crate) model: Option<String>,
    /// Anthropic's extended thinking for this agent: at most N tokens of it before each
    /// answer (in place of its role's `thinking_budget`)
    #[arg(long, value_name = "N", conflicts_with = "effort")]
    pub(crate) thinking: Option<u32>,
    /// OpenAI's reasoning effort for this agent: minimal, low, medium or high (in place of
    /// its role's `reasoning_effort`)
    #[arg(long, value_name = "EFFORT")]
    pub(crate) effort: Option<String>,
}

impl Choice {
    /// Whether thinking was asked for (and the role must be read to check it).
    pub(crate) fn asks_thinking(&self) -> bool {
        self.thinking.is_some() || self.effort.is_some()
    }

    /// The thinking asked for, as yet unchecked.
    pub(crate) fn asked(&self) -> Option<infra::provider::Reasoning> {
        use infra::provider::Reasoning;
        match (self.thinking, &self.effort) {
            (Some(n), _) => Some(Reasoning::ThinkingBudget(n)),
            (None, Some(e)) => Some(Reasoning::Effort(e.clone())),
            (None, None) => None,
        }
    }

    /// The flag that asks for `asked`.
    pub(crate) fn flag(asked: &infra::provider::Reasoning) -> &'static str {
        match asked {
            infra::provider::Reasoning::ThinkingBudget(_) => "--thinking",
            _ => "--effort",
        }
    }

    /// The thinking asked for, checked against what role `role` of `config` can ask its
    /// provider (the rule of the role settings, `Config::check_reasoning`).
    pub(crate) fn reasoning(
        &self,
        config: &domain::config::Config,
        role: &str,
    ) -> Result<Option<infra::provider::Reasoning>, CliError> {
        let Some(asked) = self.asked() else { return Ok(None) };
        config
            .check_reasoning(role, &asked)
            .map_err(|rule| CliError::usage(format!("{}: {rule} (role `{role}`)", Choice::flag(&asked))))?;
        Ok(Some(asked))
    }
}

/// `--model`'s value, if it is a model's name (clap's value parser: refused with the rule).
/// An age such as `90s`, `30m`, `12h`, `14d` or `2w`.
pub(crate) fn parse_age(text: &str) -> Option<std::time::Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return None,
    };
    number.checked_mul(seconds).map(std::time::Duration::from_secs)
}

pub(crate) fn model_name(value: &str) -> Result<String, String> {
    domain::agent::check_model(value).map(|()| value.to_owned())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_age;

    #[test]
    fn ages_are_a_number_and_a_unit() {
        assert_eq!(parse_age("14d"), Some(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_age("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("2w"), Some(Duration::from_secs(1_209_600)));
        for bad in ["", "14", "d", "1.5h", "-1h", "3 days", "1y", "99999999999999999999d"] {
            assert_eq!(parse_age(bad), None, "{bad}");
        }
    }
}

/// The agent a verb acts on, by id or name; left out, the agent whose directory you are
/// in. One argument for every verb that takes an agent that way.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct AgentArg {
    /// The agent's id or name (default: the agent whose directory you are in)
    #[arg(value_name = "AGENT", add = crate::cli::complete::agents_completer())]
    agent: Option<String>,
}

impl AgentArg {
    /// The id or name given, if one was.
    pub(crate) fn given(&self) -> Option<&str> {
        self.agent.as_deref()
    }

    /// The agent meant, in `ws`.
    pub(crate) fn resolve(
        &self,
        ctx: &crate::cli::Ctx,
        ws: &engine::store::workspace::Workspace,
    ) -> Result<domain::id::AgentId, CliError> {
        ctx.agent_named(ws, self.given())
    }
}

/// `--mode`: one of the permission modes.
pub(crate) fn mode(text: &str) -> Result<domain::config::Mode, String> {
    domain::config::Mode::parse(text)
}

/// `--on-ask`: `deny`, `fail` or `wait`.
pub(crate) fn on_ask(text: &str) -> Result<domain::question::OnAsk, String> {
    domain::question::OnAsk::parse(text).ok_or_else(|| format!("`{text}` is not one of deny, fail, wait"))
}
