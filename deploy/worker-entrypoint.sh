#!/bin/sh
# Makes the worker's workspace from $OFFSHOOT_REMOTE the first time, then runs the worker
# (its arguments are passed on: e.g. --max-agents 8). SIGTERM lets go of its agents.
set -eu
: "${OFFSHOOT_REMOTE:?set OFFSHOOT_REMOTE to the fleet's git remote}"
ws="${OFFSHOOT_WORKSPACE_DIR:-$HOME/ws}"
if [ ! -d "$ws/repo.git" ]; then
    offshoot new --from "$OFFSHOOT_REMOTE" "$ws"
fi
exec offshoot -w "$ws" worker origin "$@"
