//! Policy: permission rules on tool calls (allow / ask / deny, in Claude Code's
//! syntax), what the model is told when one refuses, and what is recorded.

use crate::support::server::Turn;
use crate::support::workspace::{Dialect, TestWorkspace};

#[test]
fn a_deny_rule_refuses_a_push_however_it_is_chained_and_names_itself() {
    let (server, t) = TestWorkspace::served("policy-deny", Dialect::Anthropic);
    t.set("permissions.deny", r#"["Bash(git push:*)"]"#);
    server.push_turns([
        Turn::bash("c1", "touch ran.txt && git push origin main"),
        Turn::bash("c2", "echo allowed > fine.txt"),
        Turn::text("done"),
    ]);
    let run = t.run(&["prompt", "--name", "Pusher", "push it"]);
    run.ok();
    let refused = server.result_text(1);
    assert!(refused.contains("refused by the rule `Bash(git push:*)` (permissions.deny); nothing ran"), "{refused}");
    let id = t.only_agent();
    let dir = t.ws.join("agents").join(&id);
    assert!(!dir.join("ran.txt").exists(), "a refused call ran part of its command");
    assert!(dir.join("fine.txt").exists(), "a call no rule names runs");
    // The decision is in the call's record.
    let record = t.step_records(&id).into_iter().next().expect("step 1").join("tools");
    let call = std::fs::read_dir(&record).expect("tools").flatten().next().expect("a call").path();
    let decision: serde_json::Value =
        serde_json::from_slice(&std::fs::read(call.join("decision.json")).expect("decision")).expect("json");
    assert_eq!(decision["verdict"], "deny");
    assert_eq!(decision["rule"], "Bash(git push:*)");
    assert_eq!(decision["key"], "permissions.deny");
}

#[test]
fn an_ask_rule_with_no_one_to_answer_refuses_at_once_and_the_run_goes_on() {
    let (server, t) = TestWorkspace::served("policy-ask", Dialect::Anthropic);
    t.set("roles.worker.permissions.ask", r#"["bash(rm:*)"]"#);
    std::fs::write(t.root.join("keep.txt"), "mine").expect("file");
    let keep = t.root.join("keep.txt");
    server.push_turns([Turn::bash("c1", &format!("rm -f {}", keep.display())), Turn::text("could not remove it")]);
    let run = t.run(&["prompt", "--name", "Asker", "remove it"]);
    run.ok();
    let said = server.result_text(1);
    assert!(said.contains("asks for a person's yes first, and no one is here to answer: refused"), "{said}");
    assert!(said.contains("(roles.worker.permissions.ask)"), "{said}");
    assert!(keep.exists());
    assert!(run.stdout.contains("could not remove it"), "{}", run.stdout);
}

#[test]
fn a_rule_that_does_not_read_is_refused_at_config_set_naming_the_key_and_nothing_is_written() {
    let t = TestWorkspace::new("policy-bad-rule");
    let before = t.git(&["rev-parse", "config/default"]);
    for (key, value, says) in [
        ("permissions.deny", r#"["Bash(git push"]"#, "does not close"),
        ("permissions.allow", r#"["Shell(ls)"]"#, "names no tool offshoot has"),
        ("roles.worker.permissions.ask", r#"["bash()"]"#, "empty pattern"),
    ] {
        let run = t.run(&["config", "set", key, value]);
        assert_eq!(run.code, 2, "{key}: {}", run.stderr);
        assert!(run.stderr.contains(&format!("`{key}`")) && run.stderr.contains(says), "{key}: {}", run.stderr);
    }
    assert_eq!(t.git(&["rev-parse", "config/default"]), before, "nothing was committed");
}
