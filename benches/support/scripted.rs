//! A bench's workspace, made by the real binary and pointed at the scripted model server.

use std::path::Path;
use std::process::Command;

use crate::server::Server;

/// Makes the workspace `root/ws` (with its home at `root/home`) and points its worker
/// role at a scripted server started here; `offshoot` is the binary on that workspace as
/// the bench runs it.
pub fn workspace(root: &Path, offshoot: &dyn Fn() -> Command) -> Server {
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root).expect("root");
    let made = crate::clean::offshoot(&root.join("home"), root).arg("new").arg(root.join("ws")).output().expect("new");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let model = Server::start();
    for (key, value) in [("providers.anthropic.base_url", model.url()), ("roles.worker.provider", "anthropic".into())] {
        let set = offshoot().args(["config", "set", key, &value]).output().expect("set");
        assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    }
    model
}
