//! Processes by their ids: signals to a process or a group, whether one still runs and
//! what it carries, and the hardening, priority and reaping of this process.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

/// Sends SIGKILL to the process group `pgid` (a group that is gone is fine).
#[expect(unsafe_code, reason = "kill(2) has no wrapper in std; it takes two integers and touches no memory")]
pub fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) reads no memory of ours; a group that is gone only yields ESRCH.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Asks process `pid` to end (SIGTERM).
#[expect(unsafe_code, reason = "kill(2) has no wrapper in std; it takes two integers and touches no memory")]
pub fn terminate(pid: u32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| std::io::Error::from(ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) reads no memory of ours.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes this process unreadable to others of the same user: not dumpable (so its
/// `/proc/<pid>/environ` and memory need CAP_SYS_PTRACE over its namespace, which a
/// sandboxed command never has) and with no core file. The driver holds API keys.
#[expect(unsafe_code, reason = "prctl and setrlimit(2) with integers and a struct on our stack")]
pub fn harden_self() {
    let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: integers, and `none` lives across the call.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        libc::setrlimit(libc::RLIMIT_CORE, &none);
    }
}

/// Makes the calling thread run only when a CPU would otherwise be idle
/// (`SCHED_IDLE`): for work that must never slow a step, such as packing objects.
#[expect(unsafe_code, reason = "sched_setscheduler(2) with a struct on our stack")]
pub fn idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` lives across the call.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// Makes this process the reaper of its orphaned descendants: a process a command
/// left behind (by leaving its group and outliving its parent) becomes our child,
/// where [`reap_strays`] finds it.
#[expect(unsafe_code, reason = "prctl(2) with integer arguments only")]
pub fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// Kills and reaps every child of ours but `keep` (a child here is a process a
/// command left behind, adopted because we are its subreaper), with its group when
/// it leads one.
pub fn reap_strays(keep: &[u32]) {
    let mut strays = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        strays.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).filter(|p| !keep.contains(p)));
    }
    for pid in strays {
        kill_stray(pid);
    }
}

#[expect(unsafe_code, reason = "getpgid, kill and waitpid take integers and a status we own")]
fn kill_stray(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: plain process syscalls on a child of ours; `status` lives across the call.
    unsafe {
        if libc::getpgid(pid) == pid {
            libc::kill(-pid, libc::SIGKILL);
        }
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
}

/// Kills every running process (with its group, when it leads one) whose environment
/// holds every one of `marks` (`NAME=value`), and waits up to `patience` for them to
/// go; returns how many there were. For what a crashed driver's commands left behind,
/// whether or not their group made it into a record.
pub fn kill_marked(marks: &[&str], patience: Duration) -> usize {
    let own = std::process::id();
    let marked: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|&pid| pid != own && running(pid) && carries(pid, marks))
        .collect();
    for &pid in &marked {
        kill_stray(pid);
    }
    let until = Instant::now() + patience;
    while Instant::now() < until && marked.iter().any(|&pid| running(pid)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    marked.len()
}

fn carries(pid: u32, marks: &[&str]) -> bool {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let vars: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
    marks.iter().all(|m| vars.contains(&m.as_bytes()))
}

/// The fields of `/proc/<pid>/stat` after the command name (`state ppid pgrp …`; the
/// name may hold spaces and parentheses), if the process exists.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` is a running process (not gone, not a zombie).
pub fn running(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`, readable for any process): with its pid, what names it.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether some running member of group `pgid` has every one of `marks`
/// (`NAME=value`) in its environment: the group is the one that was recorded, not a
/// later one that got the same number.
pub fn group_carries(pgid: u32, marks: &[&str]) -> bool {
    group_members(pgid).into_iter().any(|pid| carries(pid, marks))
}

/// Waits until no process of group `pgid` runs, or `patience` passes.
pub fn await_group(pgid: u32, patience: Duration) {
    let until = Instant::now() + patience;
    while Instant::now() < until && !group_members(pgid).is_empty() {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The processes of group `pgid` that are still running (zombies, which only wait
/// to be reaped, are not counted), read from /proc.
pub(crate) fn group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Some(fields) = stat_fields(pid) else { continue };
        if fields.first().is_some_and(|s| s != "Z") && fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) {
            members.push(pid);
        }
    }
    members
}
