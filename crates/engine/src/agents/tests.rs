use super::*;
use crate::Env;
use crate::agents::lifecycle;
use crate::store::workspace::template_files;
use infra::time::Timestamp;

/// A fresh workspace under the system's temporary directory, and where it is.
fn workspace(name: &str) -> (std::path::PathBuf, Workspace) {
    let dir = std::env::temp_dir().join(format!("offshoot-agents-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ws = Workspace::create(&dir.join("ws"), &template_files(None).expect("template")).expect("workspace");
    (dir, ws)
}

fn root(ws: &Workspace, env: &Env) -> AgentId {
    let start = Start {
        message: "lead",
        name: Some("Lead"),
        now: Timestamp::now(),
        random: 7,
        env,
        project: None,
        model: None,
        reasoning: None,
        copy_ignored: &[],
        mode: None,
        on_ask: None,
    };
    create_root(ws, "worker", "default", &start).expect("root")
}

/// A runtime that can start nothing (its binary does not exist): what it would start
/// says so instead.
fn runtime(ws: &Workspace, env: &Env) -> crate::agents::runtime::Runtime {
    crate::agents::runtime::Runtime::new(
        ws.layout.clone(),
        std::path::PathBuf::from("/nonexistent"),
        env.clone(),
        Default::default(),
    )
}

fn child<'a>(env: &'a Env, name: Option<&'a str>, key: Option<&'a str>) -> Child<'a> {
    Child {
        role: "worker",
        goal: "work",
        name,
        from: None,
        now: Timestamp::now(),
        random: 3,
        env,
        compactor: false,
        key,
    }
}

#[test]
fn a_dispatch_run_again_by_its_key_finds_its_child_or_lets_its_claim_go() {
    let (dir, ws) = workspace("key");
    let env = Env::default();
    let lead = root(&ws, &env);
    // The same call twice (a recovery runs it again): one child.
    let first = create_child(&ws, &lead, &child(&env, Some("Kid"), Some("2:d1"))).expect("first");
    let again = create_child(&ws, &lead, &child(&env, Some("Kid"), Some("2:d1"))).expect("again");
    assert_eq!(first, again);
    assert_eq!(lifecycle::descendants(&ws, &lead).expect("tree"), std::slice::from_ref(&first));
    // Another call is another child (its name, taken, refused as ever).
    let taken = create_child(&ws, &lead, &child(&env, Some("Kid"), Some("2:d2"))).expect_err("taken");
    assert!(matches!(taken, AgentError::NameTaken(..)), "{taken}");
    // What a kill left between claiming an id and a name and making the child: the call
    // run again lets both go and makes the child.
    let stale = lead.child(9);
    assert!(ws.repo.claim_mark(IDS, stale.as_str(), format!("{lead}\n2:d3").as_bytes()).expect("claim"));
    assert!(ws.repo.claim_mark(NAMES, "Late", stale.as_str().as_bytes()).expect("claim"));
    let made = create_child(&ws, &lead, &child(&env, Some("Late"), Some("2:d3"))).expect("made");
    assert_ne!(made, stale);
    assert!(ws.repo.branch_tip(&made.branch()).expect("tip").is_some());
    assert_eq!(ws.repo.mark(NAMES, "Late").expect("name"), Some(made.as_str().as_bytes().to_vec()));
    assert_eq!(ws.repo.mark(IDS, stale.as_str()).expect("claim"), None);
    // Without a key (a person's `dispatch`), nothing is looked up: a new child each time.
    let one = create_child(&ws, &lead, &child(&env, None, None)).expect("one");
    let two = create_child(&ws, &lead, &child(&env, None, None)).expect("two");
    assert_ne!(one, two);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_childs_goal_made_again_from_its_dispatch_commit_is_the_message_its_maker_sent() {
    // In a fleet a child's goal may reach it twice: the copy its maker's worker sends,
    // and the one its own driver makes from its dispatch commit when that copy was late.
    // Only a copy it knows for the same message is not delivered (and worked) twice.
    let (dir, ws) = workspace("goal-again");
    let env = Env::default();
    let lead = root(&ws, &env);
    let kid = create_child(&ws, &lead, &child(&env, Some("Kid"), Some("2:d1"))).expect("kid");
    let sent = crate::store::inbox::pending(&ws.layout, &kid).expect("inbox");
    assert_eq!(sent.len(), 1);
    // Made again later: the clock has moved on.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let tip = ws.repo.branch_tip(&kid.branch()).expect("tip").expect("branch");
    let facts = crate::store::snapshot::read_facts(&ws.repo, tip).expect("facts");
    let goal = ws.repo.read_file(tip, domain::agent::GOAL).expect("goal").unwrap_or_default();
    let again = domain::inbox::Deposit::first_of(&facts, &String::from_utf8_lossy(&goal)).render();
    assert_eq!(again, sent[0].text);
    assert_eq!(domain::inbox::identity(&again), domain::inbox::identity(&sent[0].text));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stop_marks_an_agent_with_work_left_and_no_driver() {
    let (dir, ws) = workspace("stop");
    let env = Env::default();
    let lead = root(&ws, &env);
    let rt = runtime(&ws, &env);
    // Made, its goal waiting in its inbox, no driver: work left, so a stop marks it.
    assert!(!infra::lock::LockGuard::is_held(&ws.layout.lock(&lead)).expect("probe"));
    let stopped = lifecycle::stop_all(&ws, &rt, vec![lead.clone()], std::time::Duration::ZERO).expect("stop");
    assert_eq!(stopped, [(lead.clone(), crate::agents::runtime::Stopped::NotRunning)]);
    assert!(ws.repo.mark(lifecycle::STOPPED, lead.as_str()).expect("mark").is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_agent_being_made_is_not_its_makers_to_stop_and_a_stopped_child_is_not_started_again() {
    let (dir, ws) = workspace("making");
    let env = Env::default();
    let lead = root(&ws, &env);
    let rt = runtime(&ws, &env);
    // While this process makes `lead.5`, a stop of it must not signal this process (a
    // SIGTERM here would end the test run).
    let being_made = lead.child(5);
    let making = infra::lock::LockGuard::try_acquire_making(&ws.layout.lock(&being_made)).expect("lock").expect("free");
    let stopped = rt.stop(&being_made, std::time::Duration::ZERO).expect("stop");
    assert_eq!(stopped, crate::agents::runtime::Stopped::NotRunning);
    drop(making);
    // A child the user stopped, found again by the dispatch that made it (run again
    // after a crash): answered with its id, and not started (a start would revive it;
    // this runtime cannot start anything, and would say so).
    let kid = create_child(&ws, &lead, &child(&env, Some("Kid"), Some("2:d1"))).expect("kid");
    lifecycle::mark_stopped(&ws, &kid).expect("stop");
    let tip = ws.repo.branch_tip(&lead.branch()).expect("tip").expect("lead");
    let facts = snapshot::read_facts(&ws.repo, tip).expect("facts");
    let (config_commit, _) = ws.config("default").expect("config");
    let agent = crate::step::tools::AgentContext {
        runtime: &rt,
        facts: &facts,
        config_commit,
        mcp: None,
        config: None,
        policy: None,
        hooks_jail: None,
    };
    let cx = crate::step::tools::ToolContext { env: Default::default(), agent: Some(agent), key: Some("2:d1".into()) };
    let input = serde_json::json!({"role": "worker", "goal": "work", "name": "Kid"});
    let dispatch = crate::step::tools::handler("dispatch").expect("dispatch");
    let said = dispatch.run(&cx, &input).map(|o| o.summary).map_err(|e| format!("{e:?}"));
    let said = said.expect("answered");
    assert!(said.starts_with(&format!("started `{kid}` (Kid)")) && said.contains("the user stopped it"), "{said}");
    assert!(ws.repo.mark(lifecycle::STOPPED, kid.as_str()).expect("mark").is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kept_states_are_read_again_when_what_they_are_made_of_changes() {
    use crate::ops::inspect::{StatesKept, states, states_kept};
    let (dir, ws) = workspace("kept-states");
    let env = Env::new([("ANTHROPIC_API_KEY".to_owned(), "k".to_owned())]);
    let lead = root(&ws, &env);
    let json = |s: Vec<crate::ops::inspect::AgentState>| serde_json::to_value(s).expect("json");
    let mut kept = StatesKept::default();
    let same = |kept: &mut StatesKept| {
        assert_eq!(json(states_kept(&ws, kept).expect("kept")), json(states(&ws).expect("fresh")))
    };
    same(&mut kept);
    // A driver holds it; it lets go; a stop mark; a line of its events; a new agent.
    let lock = infra::lock::LockGuard::try_acquire(&ws.layout.lock(&lead)).expect("lock").expect("free");
    same(&mut kept);
    assert_eq!(states_kept(&ws, &mut kept).expect("kept")[0].state, "running");
    drop(lock);
    same(&mut kept);
    ws.repo.set_mark(lifecycle::STOPPED, lead.as_str(), b"user").expect("mark");
    same(&mut kept);
    assert_eq!(states_kept(&ws, &mut kept).expect("kept")[0].state, "stopped");
    std::fs::create_dir_all(ws.layout.steps(&lead)).expect("steps");
    std::fs::write(
        ws.layout.steps(&lead).join("events.ndjson"),
        "{\"type\":\"end\",\"outcome\":\"busy\",\"agent\":\"x\"}\n",
    )
    .expect("events");
    same(&mut kept);
    let child = Child {
        role: "worker",
        goal: "help",
        name: None,
        from: None,
        now: Timestamp::now(),
        random: 9,
        env: &env,
        compactor: false,
        key: None,
    };
    create_child(&ws, &lead, &child).expect("child");
    same(&mut kept);
    assert_eq!(states_kept(&ws, &mut kept).expect("kept").len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
