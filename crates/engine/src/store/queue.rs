//! The attention queue on disk: one directory per question (`queue/<id>/`) holding
//! the question, a file per waiting call (`waiters/`) and, once given, the answer
//! (`answer.json`, create-only: the first answer stands). A question is made whole in
//! a temporary directory and renamed into place, so no reader sees half of one; a
//! waiter joins with a file of its own, so ten askers need no lock. Answered
//! questions stay as the record of who said what. Standing yeses (`approve
//! --for-tree`) are `grants/<stem>-<root>.json`. The workspace's internals: no
//! agent's tool reaches them.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use domain::layout::Layout;
use domain::question::{Answer, Question, Waiter};
use infra::time::Timestamp;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("no question `{0}` in the queue (`offshoot pending` lists them)")]
    Unknown(String),
    #[error("question `{id}` was answered already ({by} said {word} at {at})")]
    Answered { id: String, by: String, word: &'static str, at: String },
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

type Result<T> = std::result::Result<T, QueueError>;

/// A question as the queue holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    #[serde(flatten)]
    pub question: Question,
    pub at: String,
}

/// One entry: the question, who waits on it, and its answer if it has one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    pub id: String,
    #[serde(flatten)]
    pub asked: Asked,
    pub waiters: Vec<Waiter>,
    pub answer: Option<Answer>,
}

/// A standing yes for a tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub sameness: String,
    pub root: String,
    /// The question it was given on.
    pub question: String,
    pub by: String,
    pub at: String,
}

pub struct Queue {
    dir: PathBuf,
}

const QUESTION: &str = "question.json";
const ANSWER: &str = "answer.json";
const WAITERS: &str = "waiters";
const GRANTS: &str = "grants";

impl Queue {
    pub fn new(layout: &Layout) -> Queue {
        Queue { dir: layout.queue() }
    }

    /// Puts `waiter` on `question`: in the place it has already (a call asked again
    /// after a crash), else on the same question still open, else on a new one. The
    /// question's id.
    pub fn ask(&self, question: &Question, waiter: &Waiter) -> Result<String> {
        let stem = question.stem();
        for _ in 0..8 {
            let entries = self.same(question, &stem);
            if let Some(e) = entries.iter().find(|e| e.waiters.iter().any(|w| w.file() == waiter.file())) {
                return Ok(e.id.clone());
            }
            if let Some(open) = entries.iter().find(|e| e.answer.is_none()) {
                let path = self.dir.join(&open.id).join(WAITERS).join(waiter.file());
                match write_new(&path, &to_bytes(waiter), false) {
                    Ok(()) => return Ok(open.id.clone()),
                    // (Withdrawn as we joined: look again.)
                    Err(QueueError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
            }
            // (Numbered over every question of the stem: two different ones may share it.)
            let taken = self.list().into_iter().filter(|e| e.id.starts_with(&format!("{stem}-")));
            let n = taken.filter_map(|e| e.id.rsplit_once('-')?.1.parse::<u32>().ok()).max().unwrap_or(0) + 1;
            let id = format!("{stem}-{n}");
            let made = self.dir.join(format!(".new-{}", crate::random_u32()));
            let asked = Asked { question: question.clone(), at: Timestamp::now().to_string() };
            write_new(&made.join(QUESTION), &to_bytes(&asked), true)?;
            write_new(&made.join(WAITERS).join(waiter.file()), &to_bytes(waiter), true)?;
            match std::fs::rename(&made, self.dir.join(&id)) {
                Ok(()) => return Ok(id),
                // Another asker made that one first: join it.
                Err(_) => {
                    let _ = std::fs::remove_dir_all(&made);
                }
            }
        }
        Err(QueueError::Io {
            path: self.dir.clone(),
            source: std::io::Error::other("the question kept changing as it was asked"),
        })
    }

    /// The question `waiter` already waits on for `question` (its call asked before a
    /// crash), if any.
    pub fn place(&self, question: &Question, waiter: &Waiter) -> Option<String> {
        let stem = question.stem();
        let file = waiter.file();
        self.same(question, &stem).into_iter().find(|e| e.waiters.iter().any(|w| w.file() == file)).map(|e| e.id)
    }

    /// Every entry for the same thing as `question`.
    fn same(&self, question: &Question, stem: &str) -> Vec<Entry> {
        let sameness = question.sameness();
        self.list()
            .into_iter()
            .filter(|e| e.id.starts_with(&format!("{stem}-")) && e.asked.question.sameness() == sameness)
            .collect()
    }

    /// Whether question `id` is in the queue (a question withdrawn is not).
    pub fn exists(&self, id: &str) -> bool {
        self.dir.join(id).join(QUESTION).exists()
    }

    /// The answer to question `id`, once there is one.
    pub fn answer_of(&self, id: &str) -> Option<Answer> {
        read(&self.dir.join(id).join(ANSWER))
    }

    /// Takes `waiter` off question `id` (its call ended without an answer); a question
    /// nobody waits on any more goes.
    pub fn withdraw(&self, id: &str, waiter: &Waiter) {
        let dir = self.dir.join(id);
        let _ = std::fs::remove_file(dir.join(WAITERS).join(waiter.file()));
        let empty = std::fs::read_dir(dir.join(WAITERS)).map(|mut d| d.next().is_none()).unwrap_or(false);
        if empty && !dir.join(ANSWER).exists() {
            let gone = self.dir.join(format!(".gone-{}", crate::random_u32()));
            if std::fs::rename(&dir, &gone).is_ok() {
                let _ = std::fs::remove_dir_all(&gone);
            }
        }
    }

    /// Every question, oldest first.
    pub fn list(&self) -> Vec<Entry> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut entries: Vec<Entry> = dir
            .flatten()
            .filter_map(|d| {
                let id = d.file_name().to_str()?.to_owned();
                if id.starts_with('.') || id == GRANTS {
                    return None;
                }
                self.entry(&id)
            })
            .collect();
        entries.sort_by(|a, b| (&a.asked.at, &a.id).cmp(&(&b.asked.at, &b.id)));
        entries
    }

    /// Question `id`, if there is one.
    pub fn entry(&self, id: &str) -> Option<Entry> {
        if id.is_empty() || id.starts_with('.') || id.contains('/') || id == GRANTS {
            return None;
        }
        let dir = self.dir.join(id);
        let asked: Asked = read(&dir.join(QUESTION))?;
        let mut waiters: Vec<Waiter> = std::fs::read_dir(dir.join(WAITERS))
            .map(|d| d.flatten().filter_map(|f| read(&f.path())).collect())
            .unwrap_or_default();
        waiters.sort_by(|a, b| (&a.at, &a.agent).cmp(&(&b.at, &b.agent)));
        Some(Entry { id: id.to_owned(), asked, waiters, answer: read(&dir.join(ANSWER)) })
    }

    /// Answers question `id`; the first answer stands.
    pub fn answer(&self, id: &str, answer: &Answer) -> Result<Entry> {
        let entry = self.entry(id).ok_or_else(|| QueueError::Unknown(id.to_owned()))?;
        if let Some(given) = &entry.answer {
            return Err(answered(id, given));
        }
        match write_new(&self.dir.join(id).join(ANSWER), &to_bytes(answer), false) {
            Err(QueueError::Io { source, .. }) if source.kind() == ErrorKind::AlreadyExists => {
                let given = self.answer_of(id).ok_or_else(|| QueueError::Unknown(id.to_owned()))?;
                Err(answered(id, &given))
            }
            Err(e) => Err(e),
            Ok(()) => Ok(Entry { answer: Some(answer.clone()), ..entry }),
        }
    }

    /// Records a standing yes to `question` for the tree under `root`.
    pub fn grant(&self, grant: &Grant) -> Result<()> {
        let path = self.dir.join(GRANTS).join(grant_file(&grant.sameness, &grant.root));
        match write_new(&path, &to_bytes(grant), true) {
            Err(QueueError::Io { source, .. }) if source.kind() == ErrorKind::AlreadyExists => Ok(()),
            other => other,
        }
    }

    /// The standing yes to `question` for the tree under `root`, if one was given.
    pub fn granted(&self, question: &Question, root: &str) -> Option<Grant> {
        let sameness = question.sameness();
        let grant: Grant = read(&self.dir.join(GRANTS).join(grant_file(&sameness, root)))?;
        (grant.sameness == sameness && grant.root == root).then_some(grant)
    }
}

fn answered(id: &str, given: &Answer) -> QueueError {
    QueueError::Answered {
        id: id.to_owned(),
        by: given.by.clone(),
        word: if given.yes { "yes" } else { "no" },
        at: given.at.clone(),
    }
}

fn grant_file(sameness: &str, root: &str) -> String {
    format!("{:016x}-{root}.json", domain::id::fnv1a(sameness.as_bytes()))
}

fn to_bytes(value: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec_pretty(value).unwrap_or_default()
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes `bytes` to `path`, which must not exist, whole or not at all: a temporary
/// file beside it, linked into place (the link fails if `path` is there). Its
/// directory is made only when `make` says so (a waiter never brings back the
/// directory of a question withdrawn as it joined).
fn write_new(path: &Path, bytes: &[u8], make: bool) -> Result<()> {
    let io = |source| QueueError::Io { path: path.to_owned(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    if make {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}-{}", crate::random_u32()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn waiter(agent: &str) -> Waiter {
        Waiter { agent: agent.into(), branch: None, root: "r".into(), call: "3:t1".into(), at: "now".into() }
    }

    #[test]
    fn ten_askers_wait_on_one_question_and_the_first_answer_stands() {
        let root = std::env::temp_dir().join(format!("offshoot-queue-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let queue = Queue::new(&Layout::new(&root));
        let q = Question {
            tool: "bash".into(),
            input: json!({"command": "cargo fetch"}),
            why: "needs crates".into(),
            escalation: Some(domain::question::Escalation::Network),
            rule: None,
            by_rule: false,
            tree: "r".into(),
        };
        let ids: Vec<String> = (0..10).map(|i| queue.ask(&q, &waiter(&format!("a{i}"))).expect("asks")).collect();
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
        assert_eq!(queue.list().len(), 1);
        assert_eq!(queue.list()[0].waiters.len(), 10);
        // Asked again (a driver started again): the same place.
        assert_eq!(queue.ask(&q, &waiter("a3")).expect("asks"), ids[0]);
        assert_eq!(queue.list()[0].waiters.len(), 10);
        let yes =
            Answer { yes: true, scope: domain::question::Scope::Once, by: "user".into(), at: "t".into(), reason: None };
        queue.answer(&ids[0], &yes).expect("answers");
        let again = queue.answer(&ids[0], &Answer { yes: false, ..yes.clone() });
        assert!(matches!(again, Err(QueueError::Answered { .. })));
        assert_eq!(queue.answer_of(&ids[0]), Some(yes));
        // A new call asking the same after the answer asks anew.
        let later = Waiter { call: "9:t2".into(), ..waiter("a1") };
        let next = queue.ask(&q, &later).expect("asks");
        assert_ne!(next, ids[0]);
        queue.withdraw(&next, &later);
        assert!(queue.entry(&next).is_none(), "a question nobody waits on goes");
        assert!(queue.entry("../x").is_none());
        let _ = std::fs::remove_dir_all(&root);
    }
}
