//! An `ssh` stand-in for the transport tests and benchmark, named by `GIT_SSH_COMMAND`
//! as git honours it: it logs its arguments to `$SSH_LOG` (and how many API keys it was
//! given), fails for host `nowhere` as ssh does, else runs the remote command here in
//! `$SSH_HOME` (the login's home) — git's own `git-upload-pack`/`git-receive-pack`.

use std::path::{Path, PathBuf};

/// Writes the stand-in into `dir`; the environment that points a workspace's commands at
/// it, with `home` as the login's home.
pub fn stand_in(dir: &Path, home: &Path) -> Vec<(String, String)> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-ssh");
    let script = "#!/bin/sh\n\
        echo \"keys=$(env | grep -c _API_KEY) $@\" >> \"$SSH_LOG\"\n\
        while [ $# -gt 2 ]; do shift; done\n\
        if [ \"$1\" = nowhere ]; then echo 'ssh: connect to host nowhere port 22: Connection refused' >&2; exit 255; fi\n\
        cd \"$SSH_HOME\" && exec sh -c \"$2\"\n";
    std::fs::write(&path, script).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let text = |p: PathBuf| p.to_str().expect("utf-8").to_owned();
    vec![
        ("GIT_SSH_COMMAND".into(), text(path)),
        ("SSH_LOG".into(), text(dir.join("ssh.log"))),
        ("SSH_HOME".into(), text(home.to_path_buf())),
    ]
}
