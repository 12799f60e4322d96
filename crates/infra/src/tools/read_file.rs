//! `read_file`: numbered lines of a text file, a window at a time.

use serde_json::Value;

use super::{Kind, MAX_FILE_BYTES, Stream, Target, ToolEnv, ToolError, ToolOutput, str_arg, u64_arg};

const DEFAULT_LIMIT: u64 = 2000;

pub(super) fn run(env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
    let path = str_arg(input, "path")?;
    let offset = u64_arg(input, "offset")?.unwrap_or(1).max(1);
    let limit = u64_arg(input, "limit")?.unwrap_or(DEFAULT_LIMIT).max(1);
    let target = Target::to_read(env, path)?;
    match target.kind()? {
        None => return Err(ToolError::ToModel(format!("cannot read `{path}`: there is no such file"))),
        Some(Kind::Dir) => {
            return Err(ToolError::ToModel(format!("`{path}` is a directory; use `bash` with `ls` to list it")));
        }
        // Devices, pipes and sockets have no size and may never end (or never start).
        Some(Kind::Special) => {
            return Err(ToolError::ToModel(format!(
                "`{path}` is not a regular file (a device, pipe or socket); read it with `bash` if you must, with a timeout"
            )));
        }
        Some(Kind::File { size, .. }) if size > MAX_FILE_BYTES => return Err(too_big(path, size)),
        Some(_) => {}
    }
    // (Bounded again: the file may have grown since.)
    let bytes = target.read(MAX_FILE_BYTES)?;
    if bytes[..bytes.len().min(8192)].contains(&0) || std::str::from_utf8(&bytes).is_err() {
        return Err(ToolError::ToModel(format!("`{path}` is a binary file of {} bytes; it was not read", bytes.len())));
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len() as u64;
    if total == 0 {
        return Ok(ToolOutput::summary(format!("`{path}` is empty")));
    }
    if offset > total {
        return Err(ToolError::ToModel(format!("`{path}` has {total} lines; offset {offset} is past the end")));
    }
    let end = (offset - 1).saturating_add(limit).min(total);
    let mut body = String::new();
    for (i, line) in lines[(offset - 1) as usize..end as usize].iter().enumerate() {
        body.push_str(&format!("{:>6}\t{line}\n", offset + i as u64));
    }
    let mut summary = format!("`{path}`: lines {offset}-{end} of {total}");
    if end < total {
        summary.push_str(&format!("; continue with offset {}", end + 1));
    }
    Ok(ToolOutput { summary, streams: vec![Stream::whole("content", body)], ..ToolOutput::default() })
}

fn too_big(path: &str, size: u64) -> ToolError {
    ToolError::ToModel(format!(
        "`{path}` is {size} bytes, over the {MAX_FILE_BYTES}-byte limit; read parts of it with `bash` (head, tail, sed -n)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn windows_say_where_they_are_and_refuse_binaries() {
        let dir = std::env::temp_dir().join(format!("offshoot-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("f.txt"), "a\nb\nc\n").expect("write");
        std::fs::write(dir.join("bin"), [0u8, 1, 2]).expect("write");
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() };
        let out = run(&env, &json!({"path": "f.txt", "offset": 2, "limit": 1})).expect("reads");
        assert_eq!(out.summary, "`f.txt`: lines 2-2 of 3; continue with offset 3");
        assert_eq!(out.streams[0].text, "     2\tb\n");
        let err = run(&env, &json!({"path": "bin"})).expect_err("binary");
        assert_eq!(err.to_string(), "`bin` is a binary file of 3 bytes; it was not read");
        // A limit as large as JSON allows reads to the end instead of overflowing.
        let out = run(&env, &json!({"path": "f.txt", "offset": 2, "limit": u64::MAX})).expect("reads");
        assert_eq!(out.summary, "`f.txt`: lines 2-3 of 3");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod special_files {
    use super::*;
    use serde_json::json;

    #[test]
    fn devices_and_pipes_are_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("offshoot-read-special-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), ..Default::default() };
        let started = std::time::Instant::now();
        for path in ["/dev/zero", "fifo"] {
            let err = run(&env, &json!({"path": path})).expect_err("refused");
            assert!(err.to_string().contains("is not a regular file"), "{err}");
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
