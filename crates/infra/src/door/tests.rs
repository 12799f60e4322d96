use super::*;
use pretty_assertions::assert_eq;

/// A fresh directory with an outside beside it: `(handle root, outside)`.
fn place(name: &str) -> (PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(format!("offshoot-door-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("in/sub")).expect("dirs");
    std::fs::create_dir_all(base.join("out")).expect("dirs");
    (base.join("in"), base.join("out"))
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("c path");
    #[expect(unsafe_code, reason = "mkfifo(3) with a C string, in a test")]
    // SAFETY: `c` outlives the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo");
}

/// Each case once through `openat2` and once through the component walk.
fn both_ways(mut case: impl FnMut()) {
    case();
    NO_OPENAT2.store(true, Ordering::Relaxed);
    case();
    NO_OPENAT2.store(false, Ordering::Relaxed);
}

#[test]
fn links_anywhere_on_the_path_are_never_followed() {
    both_ways(|| {
        let (root, out) = place("links");
        std::os::unix::fs::symlink(&out, root.join("dirlink")).expect("link");
        std::os::unix::fs::symlink(out.join("planted"), root.join("dangling")).expect("link");
        std::fs::write(out.join("secret"), "outside").expect("write");
        std::os::unix::fs::symlink(out.join("secret"), root.join("filelink")).expect("link");
        let door = Beneath::open(&root).expect("open");
        let is_symlink = |r: Result<()>| matches!(r, Err(DoorError::Symlink(_)));
        assert!(is_symlink(door.write(Path::new("dangling"), b"x", None, false)));
        assert!(is_symlink(door.write(Path::new("dirlink/new"), b"x", None, false)));
        assert!(is_symlink(door.write(Path::new("dirlink/deep/new"), b"x", None, false)));
        assert!(is_symlink(door.create_dir_all(Path::new("dirlink/d"))));
        assert!(matches!(door.read(Path::new("filelink"), 100), Err(DoorError::Symlink(_))));
        assert!(matches!(door.read(Path::new("dirlink/secret"), 100), Err(DoorError::Symlink(_))));
        assert!(!out.join("planted").exists() && !out.join("new").exists() && !out.join("deep").exists());
        // Replacing puts a file where the link was; what it led to is untouched.
        door.write(Path::new("dirlink/made"), b"mine", None, true).expect("a directory where the link was");
        assert!(root.join("dirlink").is_dir() && !out.join("made").exists());
        door.remove_all(Path::new("dirlink")).expect("remove");
        std::os::unix::fs::symlink(&out, root.join("dirlink")).expect("link");
        door.write(Path::new("dangling"), b"mine", None, true).expect("replaced");
        door.write(Path::new("filelink"), b"mine", None, true).expect("replaced");
        assert_eq!(std::fs::read_to_string(root.join("filelink")).expect("read"), "mine");
        assert_eq!(std::fs::read_to_string(out.join("secret")).expect("read"), "outside");
        assert!(!out.join("planted").exists());
        assert_eq!(door.kind(Path::new("dirlink")).expect("kind"), Some(Kind::Symlink));
        door.remove(Path::new("dirlink")).expect("remove the link");
        assert!(out.is_dir());
        std::os::unix::fs::symlink(&out, root.join("sub/link")).expect("link");
        std::fs::write(root.join("sub/f"), "x").expect("write");
        door.remove_all(Path::new("sub")).expect("remove a tree");
        assert!(!root.join("sub").exists() && out.join("secret").exists());
        for escape in ["../out/secret", "/etc/hostname", "sub/../../out/secret"] {
            assert!(matches!(door.read(Path::new(escape), 100), Err(DoorError::Escapes(_))), "{escape}");
        }
        let _ = std::fs::remove_dir_all(root.parent().expect("base"));
    });
}

#[test]
fn fifos_devices_and_big_files_are_refused_without_blocking() {
    both_ways(|| {
        let (root, _) = place("special");
        mkfifo(&root.join("fifo"));
        std::os::unix::fs::symlink("/dev/zero", root.join("zero")).expect("link");
        std::fs::write(root.join("big"), vec![b'x'; 2000]).expect("write");
        let door = Beneath::open(&root).expect("open");
        assert!(matches!(door.read(Path::new("fifo"), 100), Err(DoorError::NotRegular(_))));
        assert!(matches!(door.write(Path::new("fifo"), b"x", None, false), Err(DoorError::NotRegular(_))));
        assert!(matches!(door.read(Path::new("zero"), 100), Err(DoorError::Symlink(_))));
        assert!(matches!(door.read(Path::new("sub"), 100), Err(DoorError::NotRegular(_))));
        assert!(matches!(door.read(Path::new("big"), 1000), Err(DoorError::TooLarge { size: 2000, .. })));
        assert_eq!(door.read(Path::new("big"), 2000).expect("read").len(), 2000);
        assert_eq!(door.kind(Path::new("fifo")).expect("kind"), Some(Kind::Special));
        // The harness, replacing, puts a file where the FIFO was.
        door.write(Path::new("fifo"), b"x", None, true).expect("replaced");
        assert_eq!(door.kind(Path::new("fifo")).expect("kind"), Some(Kind::File { size: 1 }));
        assert_eq!(door.kind(Path::new("nothing")).expect("kind"), None);
        let _ = std::fs::remove_dir_all(root.parent().expect("base"));
    });
}

#[test]
fn writes_make_directories_keep_or_set_modes_and_never_write_through_hard_links() {
    both_ways(|| {
        let (root, out) = place("writes");
        let door = Beneath::open(&root).expect("open");
        door.write(Path::new("a/b/c.txt"), b"one", None, false).expect("write");
        assert_eq!(std::fs::read_to_string(root.join("a/b/c.txt")).expect("read"), "one");
        door.write(Path::new("run.sh"), b"#!/bin/sh\n", Some(0o755), false).expect("write");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&root.join("run.sh")), 0o755);
        door.write(Path::new("run.sh"), b"#!/bin/sh\necho\n", None, false).expect("overwrite");
        assert_eq!(mode(&root.join("run.sh")), 0o755, "an overwrite keeps the mode");
        std::fs::write(out.join("linked"), "outside").expect("write");
        std::fs::hard_link(out.join("linked"), root.join("hard")).expect("hard link");
        door.write(Path::new("hard"), b"inside", None, false).expect("write");
        assert_eq!(std::fs::read_to_string(out.join("linked")).expect("read"), "outside");
        assert_eq!(std::fs::read_to_string(root.join("hard")).expect("read"), "inside");
        assert!(matches!(door.write(Path::new("a/b"), b"x", None, false), Err(DoorError::NotRegular(_))));
        // A file where a directory belongs is named as that.
        assert!(matches!(door.read(Path::new("a/b/c.txt/x"), 10), Err(DoorError::NotADirectory(_))));
        let through = door.write(Path::new("a/b/c.txt/x"), b"x", None, false);
        assert!(matches!(through, Err(DoorError::NotADirectory(_))), "{through:?}");
        door.symlink(Path::new("link"), OsStr::new("a/b/c.txt")).expect("symlink");
        assert_eq!(std::fs::read_link(root.join("link")).expect("link"), PathBuf::from("a/b/c.txt"));
        let _ = std::fs::remove_dir_all(root.parent().expect("base"));
    });
}

#[test]
fn a_whole_replacement_is_renamed_into_place_and_refuses_links_and_directories() {
    let (root, out) = place("whole");
    std::fs::write(root.join("kept"), "old").expect("write");
    std::fs::hard_link(root.join("kept"), out.join("other-name")).expect("link");
    // An editor's handle on the old file still reads the old text: a new file took the name.
    let held = std::fs::File::open(root.join("kept")).expect("open");
    std::os::unix::fs::symlink(out.join("planted"), root.join("dangling")).expect("link");
    std::fs::create_dir(root.join("dir")).expect("dir");
    let door = Beneath::open(&root).expect("open");
    door.replace_whole(Path::new("kept"), b"new", 0o600).expect("replaced");
    door.replace_whole(Path::new("sub/deeper/made"), b"made", 0o644).expect("made");
    assert!(matches!(door.replace_whole(Path::new("dangling"), b"x", 0o644), Err(DoorError::Symlink(_))));
    assert!(matches!(door.replace_whole(Path::new("dir"), b"x", 0o644), Err(DoorError::NotRegular(_))));
    assert_eq!(std::fs::read_to_string(root.join("kept")).expect("read"), "new");
    assert_eq!(std::io::read_to_string(held).expect("held"), "old");
    assert_eq!(std::fs::read_to_string(out.join("other-name")).expect("read"), "old", "not written through");
    let mode = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(root.join("kept")).expect("meta")) & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(std::fs::read_to_string(root.join("sub/deeper/made")).expect("read"), "made");
    assert!(!out.join("planted").exists());
    // No temporary file is left beside them.
    let names: Vec<String> = std::fs::read_dir(&root)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".new")), "{names:?}");
    let _ = std::fs::remove_dir_all(root.parent().expect("base"));
}
