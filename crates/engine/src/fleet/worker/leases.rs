//! A worker's leases: its claims, renewed by a thread of their own, and the drivers it
//! kills when a claim is no longer its to write.

use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use domain::id::AgentId;
use domain::layout::Layout;
use infra::lock::{LockGuard, Probe};

use crate::fleet::claims::{Claims, Renewal};
use crate::store::inbox;
use crate::store::workspace::Workspace;

/// A worker's claims, shared between its rounds and its lease keeper.
pub(super) struct Leases {
    pub(super) claims: Mutex<Claims>,
    /// Claims the keeper found taken over, or let go as it could not keep them fresh:
    /// the round lets go of their agents.
    pub(super) gone: Mutex<Renewal>,
}

/// The lease keeper, a thread of its own so that no round, however long (a fetch or push
/// waiting on a slow remote, many agents to send), delays a renewal: every eighth of a
/// lease it renews each claim due (a quarter lease old), all in one push, and kills the
/// driver of each claim not renewed for half a lease (the worker no longer counts itself
/// its holder: another may take it over after a whole lease), and of each claim lost. A
/// claim stale at two renewals in a row is one it cannot keep fresh: let go instead.
/// It ends with its worker.
pub(super) fn lease_keeper(layout: Layout, leases: Weak<Leases>, lease: Duration) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep((lease / 8).max(Duration::from_millis(20)));
            let Some(leases) = leases.upgrade() else { return };
            let Ok(mut claims) = leases.claims.lock() else { return };
            // Out of reach: nothing renewed, and the fence below does its work.
            let mut fence = |id: &str| {
                if let Ok(id) = AgentId::parse(id) {
                    let _ = std::fs::remove_file(layout.worker_claim(&id));
                    kill_driver_at(&layout, &id);
                }
            };
            let renewal = claims.renew(lease / 4, Instant::now(), &mut fence).unwrap_or_default();
            let gone: Vec<String> = renewal.lost.iter().chain(&renewal.dropped).cloned().collect();
            if let Ok(mut shared) = leases.gone.lock() {
                shared.lost.extend(renewal.lost);
                shared.dropped.extend(renewal.dropped);
            }
            let now = Instant::now();
            // (One taken over or let go is fenced at once, as one gone stale.)
            let stale: Vec<String> =
                claims.held().filter(|(id, _)| !claims.fresh(id, now)).map(|(id, _)| id.clone()).chain(gone).collect();
            drop(claims);
            for id in stale.iter().filter_map(|id| AgentId::parse(id).ok()) {
                kill_driver_at(&layout, &id);
            }
        }
    });
}

/// Removes what `id`'s inbox here holds: copies of messages the remote keeps until the
/// transcript there holds them.
pub(super) fn drop_inbox(ws: &Workspace, id: &AgentId) {
    for p in inbox::pending(&ws.layout, id).unwrap_or_default() {
        let _ = std::fs::remove_file(&p.path);
    }
}

/// Whether a driver holds `id` here.
pub(super) fn driven_here(ws: &Workspace, id: &AgentId) -> bool {
    LockGuard::is_held(&ws.layout.lock(id)).unwrap_or(true)
}

/// Kills the driver holding `id` here, with its process group: what it did that the
/// remote does not have is dropped (the remote is the agent).
pub(super) fn kill_driver(ws: &Workspace, id: &AgentId) {
    kill_driver_at(&ws.layout, id);
}

pub(super) fn kill_driver_at(layout: &Layout, id: &AgentId) {
    if let Ok(Probe::Held(Some(holder))) = LockGuard::probe(&layout.lock(id))
        && holder.is_alive()
        && !holder.making
    {
        infra::process::kill_group(holder.pid);
    }
}
