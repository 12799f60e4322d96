//! A step's record on disk. While its step is under way it is a directory,
//! `steps/<id>/NNNN/` (`meta.json`, `response.ndjson`, `tools/<call>/…`), so every file
//! is written on its own and a crash leaves what was written. Once the step is over, a
//! driver's packer (or `offshoot gc`) folds the directory into one file,
//! `steps/<id>/NNNN.json` — `{"files": {"<path in the directory>": …}}`, JSON files
//! embedded as they were written, other files as strings — because on most disks a
//! small file costs a whole block: seven of them a step were most of a long run's disk.
//!
//! Every reader of records goes through [`StepRecord`], which reads either form and
//! the folded one when a fold lands while it reads. A step whose tool results told the
//! model where a file of its record is (output cut short) keeps its directory, so the
//! path the model was given stays true; so does one with a file that is not UTF-8 text
//! or that is large (folding it would save nothing).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::value::RawValue;

use domain::id::AgentId;
use domain::layout::Layout;

/// The file a tool call's record gets when its result pointed the model into the record.
pub(crate) const REFERENCED: &str = "referenced";

/// Records larger than this stay directories.
const FOLD_AT_MOST: u64 = 1 << 20;

/// The most of one record's file a reader takes (a command's whole output can be large).
const READ_AT_MOST: u64 = 1 << 30;

/// The step number a name in `steps/<id>/` stands for: `0012` or `0012.json`.
pub(crate) fn number_of(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".json").unwrap_or(name);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The numbers of the steps on record in `steps_dir`, in order, each once.
pub(crate) fn numbers(steps_dir: &Path) -> Vec<u32> {
    let mut numbers: Vec<u32> = std::fs::read_dir(steps_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| number_of(&e.file_name().to_string_lossy()))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
}

fn folded_path(dir: &Path) -> PathBuf {
    dir.with_extension("json")
}

/// One step's record, in either form.
pub(crate) struct StepRecord {
    dir: PathBuf,
    folded: OnceLock<Option<Folded>>,
}

#[derive(serde::Deserialize)]
struct Folded {
    files: BTreeMap<String, Box<RawValue>>,
}

impl Folded {
    fn load(path: &Path) -> Option<Folded> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    fn get(&self, name: &str) -> Option<Vec<u8>> {
        let raw = self.files.get(name)?.get();
        if raw.starts_with('"') {
            serde_json::from_str::<String>(raw).ok().map(String::into_bytes)
        } else {
            Some(raw.as_bytes().to_vec())
        }
    }
}

impl StepRecord {
    /// Step `step` of `id`, if it is on record.
    pub fn open(layout: &Layout, id: &AgentId, step: u32) -> Option<StepRecord> {
        StepRecord::at(&layout.step(id, step))
    }

    /// The record whose directory form is `dir`, if either form exists.
    pub(crate) fn at(dir: &Path) -> Option<StepRecord> {
        let record = StepRecord { dir: dir.to_owned(), folded: OnceLock::new() };
        (record.folded().is_some() || dir.is_dir()).then_some(record)
    }

    /// File `rel` beside and below the record (`0004.json`, `0004/meta.json`), read
    /// through the door: a link, FIFO or device there is not read.
    fn read_beside(&self, rel: &str) -> Option<Vec<u8>> {
        let door = infra::door::Beneath::open(self.dir.parent()?).ok()?;
        door.read(Path::new(rel), READ_AT_MOST).ok()
    }

    fn name(&self) -> String {
        self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    fn load_folded(&self) -> Option<Folded> {
        serde_json::from_slice(&self.read_beside(&format!("{}.json", self.name()))?).ok()
    }

    fn folded(&self) -> Option<&Folded> {
        self.folded.get_or_init(|| self.load_folded()).as_ref()
    }

    /// Whether the record is one file now.
    #[cfg(test)]
    pub(crate) fn is_folded(&self) -> bool {
        self.folded().is_some()
    }

    /// File `name` of the record (`meta.json`, `tools/<call>/output.json`).
    pub fn read(&self, name: &str) -> Option<Vec<u8>> {
        if let Some(folded) = self.folded() {
            return folded.get(name);
        }
        match self.read_beside(&format!("{}/{name}", self.name())) {
            Some(bytes) => Some(bytes),
            // Folded while this reader looked: the file has the same bytes.
            None => self.load_folded()?.get(name),
        }
    }

    /// The names of the tool call records (`tools/<name>/`), in order.
    pub fn tools(&self) -> Vec<String> {
        let mut names: Vec<String> = match self.folded() {
            Some(folded) => folded
                .files
                .keys()
                .filter_map(|k| k.strip_prefix("tools/")?.split_once('/').map(|(call, _)| call.to_owned()))
                .collect(),
            None => std::fs::read_dir(self.dir.join("tools"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
        };
        names.sort();
        names.dedup();
        names
    }

    /// Where file `name` of the record is, for messages.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        match self.folded() {
            Some(_) => folded_path(&self.dir).join(name),
            None => self.dir.join(name),
        }
    }
}

/// What folding did with a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Folding {
    Folded,
    /// Left a directory, and why.
    Kept(&'static str),
}

/// Writes the file `dir` folds into (`Folded`: it is there, whole; the directory may go
/// once it is on disk).
fn write_folded(dir: &Path) -> std::io::Result<Folding> {
    let target = folded_path(dir);
    if !dir.is_dir() {
        return Ok(Folding::Kept("no directory"));
    }
    if Folded::load(&target).is_some() {
        // Folded before, its directory's removal cut short: what is left of the
        // directory is a part of what the file holds whole, and must not replace it.
        return Ok(Folding::Folded);
    }
    let mut files = BTreeMap::new();
    let mut total = 0;
    if let Some(why) = collect(dir, "", &mut files, &mut total)? {
        return Ok(Folding::Kept(why));
    }
    if files.keys().any(|name| name.rsplit('/').next() == Some(REFERENCED)) {
        return Ok(Folding::Kept("the model was told where a file of it is"));
    }
    let mut out = String::with_capacity(total as usize + 64);
    out.push_str("{\"files\": {");
    for (i, (name, text)) in files.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        out.push_str(&serde_json::to_string(name).unwrap_or_default());
        out.push_str(": ");
        if embeds_as_is(name, text) {
            out.push_str(text);
        } else {
            out.push_str(&serde_json::to_string(text).unwrap_or_default());
        }
    }
    out.push_str("}}\n");
    let temp = target.with_extension("json.tmp");
    std::fs::write(&temp, &out)?;
    std::fs::rename(&temp, &target)?;
    Ok(Folding::Folded)
}

/// A JSON file that is an object or array, with nothing around it, goes into the
/// folded file as it is (readable with `jq`); anything else as a string.
fn embeds_as_is(name: &str, text: &str) -> bool {
    name.ends_with(".json")
        && (text.starts_with('{') || text.starts_with('['))
        && text.trim_end() == text
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// The regular files below `dir`, by path from it; the reason to keep the directory
/// instead, if there is one.
fn collect(
    dir: &Path,
    prefix: &str,
    files: &mut BTreeMap<String, String>,
    total: &mut u64,
) -> std::io::Result<Option<&'static str>> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { return Ok(Some("a file name is not UTF-8")) };
        let path = format!("{prefix}{name}");
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if let Some(why) = collect(&entry.path(), &format!("{path}/"), files, total)? {
                return Ok(Some(why));
            }
        } else if kind.is_file() {
            if name.ends_with(".tmp") {
                // A rewrite's leftover, from a writer killed between its two moves.
                continue;
            }
            *total += entry.metadata()?.len();
            if *total > FOLD_AT_MOST {
                return Ok(Some("it is large"));
            }
            match String::from_utf8(std::fs::read(entry.path())?) {
                Ok(text) => files.insert(path, text),
                Err(_) => return Ok(Some("a file is not UTF-8 text")),
            };
        } else {
            return Ok(Some("it holds something other than files"));
        }
    }
    Ok(None)
}

/// Folds every record of `steps_dir` numbered below `before` (the steps that are over)
/// into one file each, then removes its directory; how many it folded. A fold cut
/// short leaves the directory whole (the file appears complete, by a rename, or not at
/// all), or the whole file beside what is left of the directory, which the next fold
/// removes. A record that cannot be folded now is left for the next time.
/// The directories go only once the files holding them are on disk (one `syncfs` for
/// them all), so a power cut cannot leave a step with neither.
pub(crate) fn fold_finished(steps_dir: &Path, before: u32) -> usize {
    let written: Vec<PathBuf> = numbers(steps_dir)
        .into_iter()
        .filter(|&n| n < before)
        .map(|n| steps_dir.join(format!("{n:04}")))
        .filter(|dir| write_folded(dir).is_ok_and(|f| f == Folding::Folded))
        .collect();
    if written.is_empty() || infra::door::sync_filesystem(steps_dir).is_err() {
        return 0;
    }
    written.iter().filter(|dir| std::fs::remove_dir_all(dir).is_ok()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("offshoot-step-record-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    #[test]
    fn a_folded_record_reads_as_the_directory_did() {
        let steps = scratch("fold");
        let dir = steps.join("0007");
        std::fs::create_dir_all(dir.join("tools/call_1")).expect("dirs");
        let meta = "{\n  \"step\": 7,\n  \"outcome\": \"ok\"\n}";
        let ndjson = "{\"type\":\"message_start\"}\n{\"type\":\"ping\"}\n";
        let odd_json = "\"just a string\"";
        std::fs::write(dir.join("meta.json"), meta).expect("meta");
        std::fs::write(dir.join("response.ndjson"), ndjson).expect("ndjson");
        std::fs::write(dir.join("tools/call_1/input.json"), "[1, 2]").expect("input");
        std::fs::write(dir.join("tools/call_1/output.json"), odd_json).expect("output");
        std::fs::write(dir.join("meta.tmp"), "half").expect("tmp");
        assert_eq!(fold_finished(&steps, 8), 1);
        assert!(!dir.exists(), "the directory goes");
        let record = StepRecord::at(&dir).expect("on record");
        assert!(record.is_folded());
        assert_eq!(record.read("meta.json").as_deref(), Some(meta.as_bytes()));
        assert_eq!(record.read("response.ndjson").as_deref(), Some(ndjson.as_bytes()));
        assert_eq!(record.read("tools/call_1/output.json").as_deref(), Some(odd_json.as_bytes()));
        assert_eq!(record.read("meta.tmp"), None);
        assert_eq!(record.tools(), vec!["call_1".to_owned()]);
        let text = std::fs::read_to_string(steps.join("0007.json")).expect("file");
        let parsed: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
        assert_eq!(parsed["files"]["meta.json"]["outcome"], "ok", "JSON files are embedded as JSON");
        assert_eq!(numbers(&steps), vec![7]);
        let _ = std::fs::remove_dir_all(&steps);
    }

    #[test]
    fn records_the_model_was_pointed_into_or_not_text_stay_directories() {
        let steps = scratch("keep");
        let pointed = steps.join("0001");
        std::fs::create_dir_all(pointed.join("tools/big")).expect("dirs");
        std::fs::write(pointed.join("tools/big/stdout"), "lots").expect("stdout");
        std::fs::write(pointed.join("tools/big").join(REFERENCED), "").expect("marker");
        let binary = steps.join("0002");
        std::fs::create_dir_all(&binary).expect("dir");
        std::fs::write(binary.join("response.ndjson"), [0xff, 0xfe]).expect("bytes");
        let linked = steps.join("0003");
        std::fs::create_dir_all(&linked).expect("dir");
        std::os::unix::fs::symlink("/etc/passwd", linked.join("meta.json")).expect("link");
        assert_eq!(fold_finished(&steps, 10), 0);
        for dir in [&pointed, &binary, &linked] {
            assert!(dir.is_dir(), "{} stays", dir.display());
            assert!(!folded_path(dir).exists());
        }
        assert_eq!(numbers(&steps), vec![1, 2, 3]);
        assert_eq!(StepRecord::at(&linked).expect("record").read("meta.json"), None, "a link is not followed");
        let _ = std::fs::remove_dir_all(&steps);
    }

    #[test]
    fn a_fold_cut_short_is_finished_by_the_next() {
        let steps = scratch("cut");
        let dir = steps.join("0004");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("meta.json"), "{\"step\": 4}").expect("meta");
        // Killed after the rename, part way through removing the directory: the file
        // is whole, what is left of the directory a part of it.
        std::fs::write(steps.join("0004.json.tmp"), "{\"fi").expect("temp");
        std::fs::create_dir_all(dir.join("tools/t")).expect("tools");
        std::fs::write(dir.join("tools/t/output.json"), "{\"out\": 1}").expect("output");
        assert_eq!(fold_finished(&steps, 5), 1);
        std::fs::create_dir_all(dir.join("tools/t")).expect("again");
        std::fs::write(dir.join("tools/t/output.json"), "{\"out\": 1}").expect("output");
        assert_eq!(numbers(&steps), vec![4], "one step, in either form");
        assert_eq!(fold_finished(&steps, 5), 1);
        assert!(!dir.exists());
        assert!(!steps.join("0004.json.tmp").exists());
        let record = StepRecord::at(&dir).expect("record");
        assert_eq!(record.read("meta.json").as_deref(), Some(&b"{\"step\": 4}"[..]), "the whole record stays");
        assert_eq!(record.tools(), vec!["t".to_owned()]);
        assert_eq!(number_of("0004.json.tmp"), None);
        assert_eq!(number_of("events.ndjson"), None);
        let _ = std::fs::remove_dir_all(&steps);
    }
}
