use std::io::Read;

use serde_json::Value;

use crate::cli::{CliError, Ctx};
use domain::grant;
use engine::step::tools::{self, ToolContext};
use infra::tools::{ToolEnv, ToolError};

/// Run a built-in tool with its JSON input on stdin, in the current directory
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The tool to run
    #[arg(required_unless_present = "list")]
    pub(crate) name: Option<String>,
    /// List the built-in tools with their input schemas
    #[arg(long)]
    pub(crate) list: bool,
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    if args.list {
        for handler in tools::handlers() {
            let spec = handler.spec();
            if ctx.out.json {
                ctx.out.event(&serde_json::to_value(&spec).unwrap_or(Value::Null));
            } else {
                ctx.out.line(&format!(
                    "{}\n  {}\n  input: {}\n",
                    spec.name,
                    spec.description.replace('\n', "\n  "),
                    spec.input_schema
                ));
            }
        }
        return Ok(());
    }
    let name = args.name.as_deref().unwrap_or("");
    let handler = tools::handler(name).ok_or_else(|| {
        CliError::usage(format!("tool `{name}` does not exist"))
            .hint(format!("tools: {}", grant::names(grant::Holder::Role)))
    })?;
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).map_err(|e| CliError::usage(format!("cannot read stdin: {e}")))?;
    let input: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!("the input on stdin is not JSON: {e}"))
            .hint(format!("e.g. echo '{{...}}' | offshoot tool {name}"))
    })?;
    let cwd =
        std::env::current_dir().map_err(|e| CliError::runtime(format!("cannot read the current directory: {e}")))?;
    // Run by hand, a tool has the user's own environment and keeps a generous
    // amount of its output in memory (nothing is recorded).
    let mut env = ToolEnv { root: cwd.clone(), cwd, ..Default::default() };
    env.commands.env = ctx.env.vars().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    env.commands.head_bytes = 1 << 20;
    env.commands.tail_bytes = 1 << 20;
    match handler.run(&ToolContext { env, agent: None, key: None }, &input) {
        Ok(output) => {
            if ctx.out.json {
                ctx.out.event(&serde_json::to_value(&output).unwrap_or(Value::Null));
            } else {
                ctx.out.line(&output.summary);
                for stream in output.streams.iter().filter(|s| !s.text.is_empty()) {
                    ctx.out.line(&format!(
                        "<{}>\n{}\n</{}>",
                        stream.name,
                        stream.text.trim_end_matches('\n'),
                        stream.name
                    ));
                }
            }
            if output.is_error { Err(CliError::runtime(format!("`{name}` reported an error"))) } else { Ok(()) }
        }
        Err(ToolError::ToModel(message)) => Err(CliError::runtime(message)),
        Err(ToolError::Fatal(message)) => Err(CliError::runtime(message)),
    }
}
