//! Reading a config: parsed, then checked rule by rule, each broken rule said with the
//! file, the line and the key it concerns.

use infra::provider::Protocol;

use super::{Config, ConfigError, FILE, Mode, ProviderConfig, RoleConfig, Sandbox, Trigger};
use crate::grant::{self, Holder};

impl Config {
    /// Parses and validates `text`; `has_file` answers whether a path exists in the
    /// same config tree (souls, recordings).
    pub fn parse(text: &str, has_file: &dyn Fn(&str) -> bool) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_at(text, s.start));
            let key = line.map(|l| key_on_line(text, l)).unwrap_or_default();
            ConfigError { file: FILE.into(), line, key, rule: e.message().trim().to_owned() }
        })?;
        config.validate(text, has_file)?;
        Ok(config)
    }

    fn validate(&self, text: &str, has_file: &dyn Fn(&str) -> bool) -> Result<(), ConfigError> {
        let fail = |key: String, rule: String| ConfigError { file: FILE.into(), line: line_of(text, &key), key, rule };
        if self.version != 1 {
            return Err(fail("version".into(), format!("version {} is not supported; use 1", self.version)));
        }
        for (name, p) in &self.providers {
            check_provider(name, p, has_file, &fail)?;
        }
        for (name, role) in &self.roles {
            self.check_role(name, role, has_file, &fail)?;
        }
        if let Some((key, rule)) = crate::hooks::check(&self.hooks) {
            return Err(fail(key, rule));
        }
        for (place, permissions) in self.roles.keys().flat_map(|r| self.permissions(r)).chain(self.permissions("")) {
            if let Some((list, rule)) = crate::permissions::check(permissions) {
                return Err(fail(format!("{place}{list}"), rule));
            }
        }
        match self.compaction.trigger {
            Trigger::ContextPercent if !matches!(self.compaction.percent, Some(1..=100)) => {
                return Err(fail(
                    "compaction.percent".into(),
                    "`context_percent` needs `percent` from 1 to 100".into(),
                ));
            }
            Trigger::EveryNSteps if !matches!(self.compaction.steps, Some(1..)) => {
                return Err(fail("compaction.steps".into(), "`every_n_steps` needs `steps` of at least 1".into()));
            }
            _ => {}
        }
        if let Some(url) = &self.telemetry.endpoint
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(fail("telemetry.endpoint".into(), format!("`{url}` must start with http:// or https://")));
        }
        let keys = self.api_key_variables();
        if let Some(path) = self.tool_env.hidden_paths.iter().find(|p| !p.starts_with('/') && !p.starts_with("~/")) {
            return Err(fail(
                "tool_env.hidden_paths".into(),
                format!("`{path}` must be an absolute path or start with `~/`"),
            ));
        }
        if let Some(key) = self.tool_env.keep.iter().find(|k| keys.contains(&k.as_str())) {
            return Err(fail(
                "tool_env.keep".into(),
                format!("`{key}` holds a provider's API key or an MCP server's token, which never reaches tools"),
            ));
        }
        if self.git.name.is_some() != self.git.email.is_some() {
            return Err(fail("git".into(), "set both `name` and `email`, or neither".into()));
        }
        self.validate_budgets(&fail)?;
        self.validate_mcp(&fail)?;
        if self.retry.max_attempts == 0 {
            return Err(fail("retry.max_attempts".into(), "must be at least 1".into()));
        }
        if self.retry.patience_secs == 0 {
            return Err(fail("retry.patience_secs".into(), "must be at least 1".into()));
        }
        if self.retry.initial_backoff_ms > self.retry.max_backoff_ms {
            return Err(fail(
                "retry.initial_backoff_ms".into(),
                format!(
                    "{} is more than `max_backoff_ms` ({}); the first wait cannot be longer than the longest",
                    self.retry.initial_backoff_ms, self.retry.max_backoff_ms
                ),
            ));
        }
        Ok(())
    }

    /// Budgets that are set must be enforceable: positive limits, and a price for
    /// every role's model when spend is capped.
    fn validate_budgets(&self, fail: &dyn Fn(String, String) -> ConfigError) -> Result<(), ConfigError> {
        let b = &self.budgets;
        for (key, value) in
            [("max_tokens", b.max_tokens), ("max_wall_seconds", b.max_wall_seconds), ("max_steps", b.max_steps)]
        {
            if value == Some(0) {
                return Err(fail(format!("budgets.{key}"), "must be at least 1 (leave it out for no limit)".into()));
            }
        }
        if let Some(usd) = b.max_cost_usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(fail("budgets.max_cost_usd".into(), "must be more than 0 (leave it out for no limit)".into()));
        }
        for (model, price) in &self.prices {
            let fields = [
                ("input", price.input),
                ("output", price.output),
                ("cache_read", price.cache_read),
                ("cache_write", price.cache_write),
            ];
            if let Some((field, _)) = fields.iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0)) {
                return Err(fail(
                    format!("prices.{model}.{field}"),
                    "must be a price of 0 or more (US dollars per million tokens)".into(),
                ));
            }
        }
        if b.max_cost_usd.is_some()
            && let Some((name, role)) = self.roles.iter().find(|(_, r)| !self.prices.contains_key(&r.model))
        {
            return Err(fail(
                format!("roles.{name}.model"),
                format!(
                    "`budgets.max_cost_usd` is set, so model `{}` needs a price: add [prices.\"{}\"] with input, output, cache_read and cache_write (US dollars per million tokens)",
                    role.model, role.model
                ),
            ));
        }
        Ok(())
    }

    /// The rules of role `name`'s settings.
    fn check_role(
        &self,
        name: &str,
        role: &RoleConfig,
        has_file: &dyn Fn(&str) -> bool,
        fail: &dyn Fn(String, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let key = |k: &str| format!("roles.{name}.{k}");
        if !self.providers.contains_key(&role.provider) {
            let known: Vec<&str> = self.providers.keys().map(String::as_str).collect();
            return Err(fail(
                key("provider"),
                format!("provider `{}` is not defined; defined: {}", role.provider, known.join(", ")),
            ));
        }
        if role.model.trim().is_empty() {
            return Err(fail(key("model"), "must name a model".into()));
        }
        if role.max_output_tokens == 0 {
            return Err(fail(key("max_output_tokens"), "must be at least 1".into()));
        }
        // Thinking settings are the provider's: each is checked against its protocol.
        {
            use infra::provider::Reasoning;
            let asked = [
                role.thinking_budget.map(|b| ("thinking_budget", Reasoning::ThinkingBudget(b))),
                role.reasoning_effort.clone().map(|e| ("reasoning_effort", Reasoning::Effort(e))),
            ];
            for (field, reasoning) in asked.into_iter().flatten() {
                self.check_reasoning(name, &reasoning).map_err(|rule| fail(key(field), rule))?;
            }
        }
        match role.context_window {
            Some(0) => return Err(fail(key("context_window"), "must be at least 1".into())),
            Some(window) if u64::from(role.max_output_tokens) > window => {
                return Err(fail(
                    key("max_output_tokens"),
                    format!(
                        "{} is more than the context window ({window}), which holds the answer too",
                        role.max_output_tokens
                    ),
                ));
            }
            _ => {}
        }
        if role.context.budget_tokens == Some(0) {
            return Err(fail(key("context.budget_tokens"), "must be at least 1 (leave it out for no limit)".into()));
        }
        if name == grant::COMPACTOR && !role.tools.is_empty() {
            return Err(fail(
                key("tools"),
                format!("the compactor's tools are fixed ({}); leave `tools` out", grant::names(Holder::Compactor)),
            ));
        }
        for tool in &role.tools {
            if grant::tool(tool).is_some_and(|t| t.holder == Holder::Compactor) {
                return Err(fail(key("tools"), format!("`{tool}` is the compactor's alone; no role is granted it")));
            }
            if !grant::tool(tool).is_some_and(|t| t.holder == Holder::Role) {
                return Err(fail(
                    key("tools"),
                    format!("tool `{tool}` does not exist; tools: {}", grant::names(Holder::Role)),
                ));
            }
        }
        if let Some(path) = role.read_paths.iter().find(|p| !p.starts_with('/') && !p.starts_with("~/")) {
            return Err(fail(key("read_paths"), format!("`{path}` must be an absolute path or start with `~/`")));
        }
        if let Some(path) = role.write_paths.iter().find(|p| !p.starts_with('/')) {
            return Err(fail(key("write_paths"), format!("`{path}` must be an absolute path")));
        }
        for pattern in &role.copy_ignored {
            if let Some(problem) = crate::agent::copy_ignored_problem(pattern) {
                return Err(fail(key("copy_ignored"), format!("`{pattern}` {problem}")));
            }
        }
        for (field, value) in [
            ("max_processes", role.max_processes),
            ("max_file_bytes", role.max_file_bytes),
            ("max_commit_file_bytes", role.max_commit_file_bytes),
        ] {
            if value == 0 {
                return Err(fail(key(field), format!("`{field}` must be at least 1")));
            }
        }
        if role.mode.is_some_and(|m| m != Mode::Full) && role.sandbox == Sandbox::None {
            return Err(fail(
                key("mode"),
                format!(
                    "`mode = \"{}\"` runs commands in the sandbox, and `sandbox = \"none\"` has none: drop one (`mode = \"full\"` is no sandbox)",
                    role.mode().word()
                ),
            ));
        }
        if !role.network && (role.sandbox != Sandbox::WorkspaceWrite || role.mode == Some(Mode::Full)) {
            return Err(fail(
                key("network"),
                "`network = false` is enforced by the sandbox: set `sandbox = \"workspace-write\"` too".into(),
            ));
        }
        let soul = format!("souls/{name}.md");
        if !has_file(&soul) {
            return Err(fail(format!("roles.{name}"), format!("role `{name}` has no soul: add `{soul}`")));
        }
        Ok(())
    }
}

/// The rules of provider `name`'s settings.
fn check_provider(
    name: &str,
    p: &ProviderConfig,
    has_file: &dyn Fn(&str) -> bool,
    fail: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("providers.{name}.{k}");
    match p.protocol {
        Protocol::Replay if p.recording.is_none() => {
            return Err(fail(key("recording"), "a `replay` provider needs `recording`".into()));
        }
        Protocol::Replay => {
            let path = p.recording.as_deref().unwrap_or("");
            if !has_file(path) {
                return Err(fail(key("recording"), format!("`{path}` is not in the config tree")));
            }
        }
        Protocol::Command if p.command.as_ref().is_none_or(|c| c.is_empty()) => {
            return Err(fail(key("command"), "a `command` provider needs a non-empty `command`".into()));
        }
        Protocol::Anthropic | Protocol::OpenaiChat | Protocol::OpenaiResponses
            if p.base_url.is_none() && p.base_url_env.is_none() =>
        {
            return Err(fail(key("base_url"), format!("a `{}` provider needs `base_url`", p.protocol.name())));
        }
        _ => {}
    }
    for (field, value) in [("api_key_env", &p.api_key_env), ("base_url_env", &p.base_url_env)] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(fail(key(field), "must name an environment variable (leave it out for none)".into()));
        }
    }
    if p.idle_timeout_secs == 0 {
        return Err(fail(key("idle_timeout_secs"), "must be at least 1".into()));
    }
    if p.call_timeout_secs == 0 {
        return Err(fail(key("call_timeout_secs"), "must be at least 1".into()));
    }
    if let Some(url) = &p.base_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(fail(key("base_url"), format!("`{url}` must start with http:// or https://")));
    }
    Ok(())
}

fn line_at(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// The dotted key a line sets: its table header above plus the key before `=`.
fn key_on_line(text: &str, line: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let Some(here) = lines.get(line.saturating_sub(1)) else {
        return String::new();
    };
    let here = here.trim();
    if let Some(header) = header_name(here) {
        return header.to_owned();
    }
    let key = here.split('=').next().unwrap_or("").trim().trim_matches('"');
    let table = lines[..line.saturating_sub(1)].iter().rev().find_map(|l| header_name(l.trim()));
    match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_owned(),
    }
}

fn header_name(line: &str) -> Option<&str> {
    line.strip_prefix('[')?.split(']').next().map(str::trim)
}

/// The line that sets a dotted key (or opens its table), if the text has one.
pub(super) fn line_of(text: &str, key: &str) -> Option<usize> {
    let mut table = String::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(h) = header_name(line) {
            // `[prices."gpt-4.1-mini"]` names the key `prices.gpt-4.1-mini`.
            table = h.replace('"', "");
            if h == key {
                return Some(i + 1);
            }
            continue;
        }
        let k = line.split('=').next().unwrap_or("").trim().trim_matches('"');
        if !k.is_empty() && line.contains('=') {
            let full = if table.is_empty() { k.to_owned() } else { format!("{table}.{k}") };
            let full = full.replace('"', "");
            if full == key {
                return Some(i + 1);
            }
        }
    }
    None
}
