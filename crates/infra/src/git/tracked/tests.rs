use super::*;
use crate::git::{Position, Project, Repo, TreeEdit};
use pretty_assertions::assert_eq;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("offshoot-git-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A workspace-like pair of repositories with one agent directory attached.
fn setup(name: &str) -> (PathBuf, Repo, Project, Tracked, Oid) {
    let dir = temp_dir(name);
    let repo = Repo::init(&dir.join("repo.git")).expect("init");
    let project =
        Project::init(&dir.join("project.git"), &dir.join("gits"), ".offshoot", &dir.join("repo.git/objects"))
            .expect("project");
    let edits = [
        TreeEdit::Write { path: ".offshoot/goal.md".into(), bytes: b"goal".to_vec() },
        TreeEdit::Write { path: ".offshoot/messages/0001-user.md".into(), bytes: b"hi".to_vec() },
        TreeEdit::Write { path: "README".into(), bytes: b"inherited".to_vec() },
    ];
    let first = repo.commit_edits(&[], None, &edits, "dispatch").expect("commit");
    repo.create_branch("agents/a", first, "dispatch").expect("branch");
    let main = project.branch_tip(crate::git::MAIN).expect("main").expect("main exists");
    project.create_branch("Agent", main).expect("project branch");
    let root = dir.join("agents/a");
    std::fs::create_dir_all(&root).expect("dir");
    project.attach("a", &root, &Position { branch: Some("Agent".into()), head: Some(main) }).expect("attach");
    let tracked = Tracked::open(&dir.join("repo.git"), &root, &dir.join("index/a"), ".offshoot", ".offshoot/messages")
        .expect("open");
    tracked.checkout(first).expect("checkout");
    (dir, repo, project, tracked, first)
}

fn adds<'a>(entries: &'a [(&'a str, &'a [u8])], harness: &'a [(&'a str, &'a [u8])]) -> Additions<'a> {
    Additions { entries, harness, removed: &[] }
}

#[test]
fn steps_commit_the_directory_as_it_is_and_only_harness_files_under_offshoot() {
    let (dir, repo, _project, tracked, first) = setup("steps");
    let root = dir.join("agents/a");
    assert_eq!(std::fs::read_to_string(root.join("README")).expect("checked out"), "inherited");
    assert_eq!(std::fs::read_to_string(root.join(".offshoot/messages/0001-user.md")).expect("checked out"), "hi");

    let second = tracked.commit("agents/a", first, &adds(&[("0002-model.json", b"{}")], &[]), None, "output");
    let second = second.expect("append");
    std::fs::write(root.join("work.txt"), "product").expect("write");
    // The agent's own edits under .offshoot/ are never captured by the scan.
    std::fs::write(root.join(".offshoot/goal.md"), "forged").expect("write");
    std::fs::write(root.join(".offshoot/stray"), "x").expect("write");
    let add = adds(&[("0003-tool.json", b"{}")], &[(".offshoot/git", b"branch Agent\n")]);
    let third = tracked
        .commit("agents/a", second, &add, Some(&tracked.stage(Scan::All, u64::MAX).expect("stage")), "tool")
        .expect("scan");

    assert_eq!(repo.branch_tip("agents/a").expect("tip"), Some(third));
    assert_eq!(repo.read_file(third, "work.txt").expect("read"), Some(b"product".to_vec()));
    assert_eq!(repo.read_file(third, ".offshoot/goal.md").expect("read"), Some(b"goal".to_vec()));
    assert_eq!(repo.read_file(third, ".offshoot/stray").expect("read"), None);
    assert_eq!(repo.read_file(third, ".offshoot/git").expect("read"), Some(b"branch Agent\n".to_vec()));
    assert_eq!(repo.read_file(third, ".git").expect("read"), None);
    let names: Vec<_> = repo.list_dir(third, ".offshoot").expect("ls").into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec!["git", "goal.md", "messages"]);
    let listed: Vec<_> = repo.list_dir(third, ".offshoot/messages").expect("ls").into_iter().map(|e| e.name).collect();
    assert_eq!(listed, vec!["0001-user.md", "0002-model.json", "0003-tool.json"]);
    // A stale parent is refused: one writer per branch.
    let err = tracked.commit("agents/a", second, &adds(&[("0004-x.md", b"x")], &[]), None, "late").expect_err("race");
    assert!(matches!(err, GitError::Raced { .. }), "{err}");
    let err = tracked.commit("agents/a", third, &adds(&[], &[("elsewhere.txt", b"x")]), None, "out").expect_err("out");
    assert!(matches!(err, GitError::Outside { .. }), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_directory_has_a_git_directory_of_its_own() {
    let (dir, _repo, project, _tracked, _) = setup("project");
    let root = dir.join("agents/a");
    assert_eq!(project.attachment("a", &root), crate::git::Attachment::Attached);
    let position = project.position("a").expect("position");
    assert_eq!(position.branch.as_deref(), Some("Agent"));
    // Its config and hooks are the harness's; changed, they are put back.
    assert!(project.put_back_config("a").expect("check").is_empty());
    std::fs::write(dir.join("gits/a/config"), "[core]\n\tfsmonitor = touch /tmp/x\n").expect("write");
    std::fs::write(dir.join("gits/a/hooks/post-commit"), "#!/bin/sh\n").expect("write");
    assert_eq!(project.put_back_config("a").expect("put back"), ["config", "hooks"]);
    assert!(!std::fs::read_to_string(dir.join("gits/a/config")).expect("read").contains("fsmonitor"));
    assert!(!dir.join("gits/a/hooks/post-commit").exists());
    // Missing (an attachment a kill cut short) they run nothing: not reported, made again.
    std::fs::remove_dir(dir.join("gits/a/hooks")).expect("rmdir");
    std::fs::remove_file(dir.join("gits/a/config")).expect("rm");
    assert!(project.planted("a").expect("check").is_empty());
    assert!(project.put_back_config("a").expect("put back").is_empty());
    assert!(dir.join("gits/a/hooks").is_dir() && dir.join("gits/a/config").is_file());
    // git skips blanks after `ref:`, so does this.
    std::fs::write(dir.join("gits/a/HEAD"), "ref:refs/heads/Agent\n").expect("write");
    assert_eq!(project.attachment("a", &root), crate::git::Attachment::Attached);
    std::fs::write(root.join(".git"), "gitdir: /elsewhere\n").expect("write");
    assert_eq!(project.attachment("a", &root), crate::git::Attachment::DotGitWrong);
    project.restore_dot_git("a", &root).expect("restore");
    assert_eq!(project.attachment("a", &root), crate::git::Attachment::Attached);
    project.detach("a");
    assert_eq!(project.attachment("a", &root), crate::git::Attachment::Detached);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn raw_tree_insertion_keeps_git_order() {
    let id = |b: u8| Oid::from_bytes(&[b; 20]).expect("oid");
    let mut first = [(&b"0002-b.json"[..], id(2)), (&b"0001-a.md"[..], id(1))];
    let raw = raw_tree_with(&[], &mut first).expect("tree");
    let mut more = [(&b"10000-z.md"[..], id(4)), (&b"0003-c.md"[..], id(3)), (&b"0001-a.md"[..], id(5))];
    let raw = raw_tree_with(&raw, &mut more).expect("tree");
    let mut names = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        let nul = at + raw[at..].iter().position(|&b| b == 0).expect("nul");
        names.push(String::from_utf8_lossy(&raw[at + 7..nul]).into_owned());
        at = nul + 21;
    }
    assert_eq!(names, vec!["0001-a.md", "0002-b.json", "0003-c.md", "10000-z.md"]);
    let mut with_dir = Vec::from(&b"40000 sub\0"[..]);
    with_dir.extend_from_slice(id(9).as_bytes());
    assert!(raw_tree_with(&with_dir, &mut []).is_none());
}

#[test]
fn harness_files_may_be_nested() {
    let (dir, repo, _project, tracked, first) = setup("nested");
    let add = adds(&[("0002-tool.json", b"{}")], &[(".offshoot/skills/s/SKILL.md", b"skill")]);
    let second = tracked.commit("agents/a", first, &add, None, "skill").expect("commit");
    assert_eq!(repo.read_file(second, ".offshoot/skills/s/SKILL.md").expect("read"), Some(b"skill".to_vec()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_scan_of_paths_looks_only_there_and_never_at_the_harness() {
    let (dir, repo, _project, tracked, first) = setup("scan-paths");
    let root = dir.join("agents/a");
    std::fs::create_dir_all(root.join("src")).expect("dir");
    std::fs::write(root.join("src/told.rs"), "told").expect("write");
    std::fs::write(root.join("untold.rs"), "untold").expect("write");
    std::fs::write(root.join(".offshoot/stray"), "x").expect("write");
    let paths = vec!["src".to_owned(), ".offshoot/stray".to_owned(), ".git".to_owned()];
    let add = adds(&[("0002-tool.json", b"{}")], &[]);
    let second = tracked
        .commit("agents/a", first, &add, Some(&tracked.stage(Scan::Paths(&paths), u64::MAX).expect("stage")), "tool")
        .expect("scan");
    assert_eq!(repo.read_file(second, "src/told.rs").expect("read"), Some(b"told".to_vec()));
    assert_eq!(repo.read_file(second, "untold.rs").expect("read"), None, "a path not named is not scanned");
    assert_eq!(repo.read_file(second, ".offshoot/stray").expect("read"), None);
    let add = adds(&[("0003-tool.json", b"{}")], &[]);
    let third = tracked
        .commit("agents/a", second, &add, Some(&tracked.stage(Scan::All, u64::MAX).expect("stage")), "tool")
        .expect("scan");
    assert_eq!(repo.read_file(third, "untold.rs").expect("read"), Some(b"untold".to_vec()));
}

#[test]
fn an_attach_cut_short_leaves_the_directory_detached_to_be_made_again() {
    let dir = temp_dir("attach-cut");
    let project = Project::init(&dir.join("project.git"), &dir.join("gits"), ".offshoot", &dir).expect("project");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).expect("mkdir");
    let main = project.branch_tip(crate::git::MAIN).expect("main");
    // A head the shared store lacks fails the attach after most of it is written.
    let missing = Oid::from_str("0123456789abcdef0123456789abcdef01234567").expect("oid");
    let at = Position { branch: Some("agents/a".into()), head: Some(missing) };
    assert!(project.attach("a", &work, &at).is_err());
    assert_eq!(project.attachment("a", &work), crate::git::Attachment::Detached);

    let at = Position { branch: Some("agents/a".into()), head: main };
    project.attach("a", &work, &at).expect("attach");
    assert_eq!(project.attachment("a", &work), crate::git::Attachment::Attached);
    assert_eq!(project.position("a").expect("position").head, main);
    let _ = std::fs::remove_dir_all(&dir);
}

fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
}

#[test]
fn rule_files_that_are_not_files_are_cleared_where_a_scan_walks_and_ignored_directories_are_left() {
    let (dir, repo, _project, tracked, first) = setup("rule-files");
    let root = dir.join("agents/a");
    // An ignored directory with a tracked file in it is walked by libgit2 all the same.
    let edits = [TreeEdit::Write { path: "build/keep.txt".into(), bytes: b"kept".to_vec() }];
    let second = repo.commit_edits(&[first], Some(first), &edits, "tracked in build").expect("commit");
    repo.move_branch("agents/a", second, first, "tracked in build").expect("move");
    tracked.checkout(second).expect("checkout");
    std::fs::write(root.join(".gitignore"), "node_modules/\nbuild/\n").expect("ignore");
    std::fs::create_dir_all(root.join("sub/deep/.gitattributes")).expect("dirs");
    mkfifo(&root.join("sub/.gitignore"));
    mkfifo(&root.join("build/.gitattributes"));
    std::fs::create_dir_all(root.join("node_modules/pkg")).expect("dirs");
    mkfifo(&root.join("node_modules/pkg/.gitignore"));

    let mut cleared = tracked.clear_rule_files(Scan::All).expect("clear");
    cleared.sort();
    assert_eq!(cleared, ["build/.gitattributes", "sub/.gitignore", "sub/deep/.gitattributes"]);
    let left = std::fs::symlink_metadata(root.join("node_modules/pkg/.gitignore")).expect("left");
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&left.file_type()));

    // libgit2 does not read what was left either: the scan ends.
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let staged = tracked.stage(Scan::All, u64::MAX).map(|s| s.skipped.len());
        let _ = done.send(staged.is_ok());
    });
    assert_eq!(ended.recv_timeout(std::time::Duration::from_secs(20)), Ok(true), "the scan was held");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_shared_repository_that_borrowed_the_harnesss_objects_is_given_them_and_stops() {
    let dir = temp_dir("borrowed");
    let repo = Repo::init(&dir.join("repo.git")).expect("init");
    let harness_objects = dir.join("repo.git/objects");
    let edits = [
        TreeEdit::Write { path: ".offshoot/goal.md".into(), bytes: b"goal".to_vec() },
        TreeEdit::Write { path: "work.txt".into(), bytes: b"the agent's work".to_vec() },
    ];
    let scanned = repo.commit_edits(&[], None, &edits, "scan").expect("commit");
    let work = repo.work_tree(scanned, ".offshoot", None).expect("tree");
    let shared = dir.join("project.git");
    let gits = dir.join("gits");
    // A new shared repository borrows nothing of the harness's, not even through the
    // harness's handle: an export takes the work products' tree in first.
    let project = Project::init(&shared, &gits, ".offshoot", &harness_objects).expect("project");
    let alternates = shared.join("objects/info/alternates");
    assert_eq!(std::fs::read_to_string(&alternates).unwrap_or_default(), "");
    assert!(!project.has_commit(scanned));
    assert!(project.commit_work(&[], work, None, "export").is_err());
    assert_eq!(project.take_work(&repo, work).expect("take"), 2);
    let exported = project.commit_work(&[], work, None, "export").expect("commit");
    assert!(project.has_commit(exported));
    drop(project);
    // One made when it borrowed: an agent's published commit names the harness's tree.
    std::fs::write(&alternates, "../../repo.git/objects\n").expect("borrow");
    let published = {
        let old = git2::Repository::open_bare(&shared).expect("open");
        let sig = git2::Signature::now("A", "a@example.com").expect("sig");
        let tree = old.find_tree(work).expect("borrowed tree");
        old.commit(Some("refs/heads/Agent"), &sig, &sig, "work", &tree, &[]).expect("commit")
    };
    Project::open(&shared, &gits, &harness_objects).expect("open");
    assert_eq!(std::fs::read_to_string(&alternates).expect("alternates"), "");
    // What an agent's git sees: the commit whole, nothing of the harness's beyond it.
    let plain = git2::Repository::open_bare(&shared).expect("open");
    let tree = plain.find_commit(published).and_then(|c| c.tree()).expect("tree");
    let blob = tree.get_name("work.txt").expect("entry").to_object(&plain).expect("blob");
    assert_eq!(blob.as_blob().expect("blob").content(), b"the agent's work");
    assert!(plain.find_commit(scanned).is_err(), "the harness's commit is not the agents'");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_git_directory_left_with_its_head_alone_is_made_again() {
    let (dir, _repo, project, _tracked, _first) = setup("head-alone");
    let root = dir.join("agents/a");
    assert_eq!(project.attachment("a", &root), crate::git::Attachment::Attached);
    let git = dir.join("gits/a");
    for entry in std::fs::read_dir(&git).expect("list").flatten() {
        if entry.file_name() != "HEAD" {
            let path = entry.path();
            std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path)).expect("remove");
        }
    }
    assert_eq!(project.attachment("a", &root), crate::git::Attachment::Detached);
    let _ = std::fs::remove_dir_all(&dir);
}
