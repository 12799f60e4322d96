use super::*;
use pretty_assertions::assert_eq;

fn defaults_have(path: &str) -> bool {
    DEFAULT_FILES.iter().any(|(p, _)| *p == path)
}

#[test]
fn the_embedded_default_is_valid() {
    let config = Config::parse(DEFAULT_FILES[0].1, &defaults_have).expect("default config");
    assert_eq!(
        config.roles["worker"].tools,
        vec![
            "bash",
            "read_file",
            "write_file",
            "edit_file",
            "apply_patch",
            "grep",
            "glob",
            "cd",
            "dispatch",
            "message",
            "load_skill"
        ]
    );
    assert_eq!(config.providers["ollama"].api_key_env, None);
}

#[test]
fn errors_name_file_line_and_key() {
    let text = "version = 1\n[roles.worker]\nprovider = \"nowhere\"\nmodel = \"m\"\n";
    let err = Config::parse(text, &|_| true).expect_err("unknown provider");
    assert_eq!(
        err.to_string(),
        "offshoot.toml:3: `roles.worker.provider`: provider `nowhere` is not defined; defined: "
    );

    let text = "version = 1\n[retry]\nmax_attempts = \"four\"\n";
    let err = Config::parse(text, &|_| true).expect_err("bad type");
    assert_eq!((err.line, err.key.as_str()), (Some(3), "retry.max_attempts"));

    let text = "version = 1\n[retry]\nmax_attempts = 2\nbogus = 1\n";
    let err = Config::parse(text, &|_| true).expect_err("unknown key");
    assert_eq!((err.line, err.key.as_str()), (Some(4), "retry.bogus"));
    assert!(err.rule.contains("unknown field `bogus`"), "{}", err.rule);
}

#[test]
fn values_that_cannot_work_are_refused_at_their_line() {
    let base = DEFAULT_FILES[0].1;
    let cases = [
        ("context_window = 200000", "context_window = 0", "roles.worker.context_window", "must be at least 1"),
        (
            "max_output_tokens = 16000",
            "max_output_tokens = 300000",
            "roles.worker.max_output_tokens",
            "more than the context window (200000)",
        ),
        ("model = \"claude-sonnet-4-5\"", "model = \" \"", "roles.worker.model", "must name a model"),
        (
            "api_key_env = \"ANTHROPIC_API_KEY\"",
            "api_key_env = \"\"",
            "providers.anthropic.api_key_env",
            "must name an environment variable",
        ),
        (
            "initial_backoff_ms = 500",
            "initial_backoff_ms = 60000",
            "retry.initial_backoff_ms",
            "more than `max_backoff_ms` (30000)",
        ),
        ("budget_tokens = 150000", "budget_tokens = 0", "roles.worker.context.budget_tokens", "at least 1"),
        ("# max_steps = 500", "max_steps = 0", "budgets.max_steps", "at least 1"),
        ("# max_cost_usd = 5.0", "max_cost_usd = -1.0", "budgets.max_cost_usd", "more than 0"),
        (
            "cache_read = 0.10\ncache_write = 0.40",
            "cache_read = -0.10\ncache_write = 0.40",
            "prices.gpt-4.1-mini.cache_read",
            "0 or more",
        ),
    ];
    for (from, to, key, rule) in cases {
        assert!(base.contains(from), "{from}");
        let text = base.replacen(from, to, 1);
        let err = Config::parse(&text, &defaults_have).expect_err(key);
        let line = text.lines().position(|l| to.starts_with(l) && !l.is_empty()).map(|i| i + 1);
        assert_eq!((err.key.as_str(), err.line), (key, line), "{err}");
        assert!(err.rule.contains(rule), "{err}");
    }
}

#[test]
fn a_role_without_a_soul_is_refused() {
    let text = DEFAULT_FILES[0].1;
    let err = Config::parse(text, &|p| p != "souls/worker.md").expect_err("no soul");
    assert_eq!(err.key, "roles.worker");
    assert_eq!(err.rule, "role `worker` has no soul: add `souls/worker.md`");
}

#[test]
fn the_compactors_tools_are_fixed_and_its_alone() {
    let base = DEFAULT_FILES[0].1;
    let text = base.replace("tools = []", "tools = [\"bash\"]");
    let err = Config::parse(&text, &defaults_have).expect_err("compactor with tools");
    assert_eq!(err.key, "roles.compactor.tools");
    assert!(err.rule.contains("fixed (write_summary, mark_for_deletion)"), "{}", err.rule);
    let text = base.replacen("\"load_skill\"]", "\"load_skill\", \"write_summary\"]", 1);
    let err = Config::parse(&text, &defaults_have).expect_err("worker with a compactor tool");
    assert_eq!(
        (err.key.as_str(), err.rule.as_str()),
        ("roles.worker.tools", "`write_summary` is the compactor's alone; no role is granted it")
    );
    let config = Config::parse(base, &defaults_have).expect("default");
    assert_eq!(config.grant("compactor"), ["write_summary", "mark_for_deletion"]);
}

#[test]
fn mcp_servers_are_checked_where_they_are_written() {
    let base = DEFAULT_FILES[0].1;
    let refused = |extra: &str| -> String {
        let text = format!("{base}\n{extra}\n");
        Config::parse(&text, &defaults_have).expect_err("refused").to_string()
    };
    let fine = |extra: &str| Config::parse(&format!("{base}\n{extra}\n"), &defaults_have).expect("valid");
    let config = fine("[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs\"]");
    assert_eq!(config.mcp_servers_of("worker"), ["docs"]);
    assert!(config.mcp_servers_of("compactor").is_empty());
    for (extra, rule) in [
        ("[mcp_servers.a__b]\ncommand = \"x\"", "may not hold `__`"),
        ("[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h\"", "not both"),
        ("[mcp_servers.a]\nargs = [\"x\"]", "needs `command`"),
        ("[mcp_servers.a]\nurl = \"ftp://h\"", "must start with http://"),
        ("[mcp_servers.a]\nurl = \"https://u:p@h/mcp\"", "a URL with credentials"),
        ("[mcp_servers.a]\nurl = \"https:///mcp\"", "names no host"),
        ("[mcp_servers.a]\nurl = \"https://h\"\nheaders = { \"Bad Name\" = \"v\" }", "is not a header's name"),
        ("[mcp_servers.a]\nurl = \"https://h\"\nbearer_token_env_var = \"PATH\"", "withheld from every command"),
        ("[mcp_servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }", "is for HTTP servers"),
        ("[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_secs = 0", "must be at least 1"),
        ("[telemetry]\nendpoint = \"localhost:4318\"", "telemetry.endpoint"),
        ("[telemetry]\nendpoint = \"grpc://h:4317\"", "must start with http:// or https://"),
        ("[telemetry]\nhost = \"h\"", "unknown field `host`"),
    ] {
        let error = refused(extra);
        assert!(error.contains(rule), "{extra}: {error}");
    }
    let naming = base.replacen("[roles.worker]\n", "[roles.worker]\nmcp_servers = [\"nope\"]\n", 1);
    let error = Config::parse(&naming, &defaults_have).expect_err("refused").to_string();
    assert!(error.contains("MCP server `nope` is not defined"), "{error}");
}
