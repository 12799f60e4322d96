"""A real ACP client (the `agent-client-protocol` package from PyPI) driving
`offshoot acp`. Reads a plan as JSON on stdin: the command to start the agent, its
environment, the session's cwd and the steps to take; prints one JSON line per thing
it observed, for the Rust test to assert on.

Steps: ["new"], ["authenticate", method], ["prompt", text], ["cancel_after", text, seconds], ["load"], ["resume"],
["fork"] (the session forked; the steps after it go to the fork), ["close"], ["list"],
["set_mode", id], ["set_option", id, value], ["prompt_watching", text, path, needle] (whether the file
holds the needle before the turn ends), ["bad_prompt", session_id, text], ["prompt_twice", text, text, seconds] (the second
sent that long after the first, while it runs), ["kill_during", text, seconds] (the agent process killed
that long after the prompt), ["quit_during", text, seconds] (the prompt sent, and
the connection closed that long after, mid-turn). A fresh process (a new connection)
starts at every ["restart"]. The plan's "answers" are what the user chooses at each permission request,
in turn: an option id, "cancelled", or "error" (a client that cannot answer). Its
"mcp_servers" go with every new session. With "compaction", the client says it takes
compaction updates, and prints each it is sent; with "subagents", that it takes sub-sessions,
and prints each `subagent_update` and each session a tool call's update names.
"""

import asyncio
import json
import sys

import acp
from acp import text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    EnvVariable,
    McpServerStdio,
    RequestPermissionResponse,
)


def servers_of(plan):
    """The plan's "mcp_servers" (name, command, args, env) as the editor passes them."""
    return [
        McpServerStdio(
            name=s["name"],
            command=s["command"],
            args=s.get("args", []),
            env=[EnvVariable(name=k, value=v) for k, v in s.get("env", {}).items()],
        )
        for s in plan.get("mcp_servers", [])
    ]


def options_of(response):
    """The session options a response carries: id → current value."""
    options = getattr(response, "config_options", None) or []
    return {o.root.id if hasattr(o, "root") else o.id: current_of(o) for o in options}


def mode_of(response):
    """The mode a response says is in force, and the ones offered."""
    modes = getattr(response, "modes", None)
    if modes is None:
        return None
    return {"current": modes.current_mode_id, "available": [m.id for m in modes.available_modes]}


def current_of(option):
    inner = option.root if hasattr(option, "root") else option
    return getattr(inner, "current_value", None)


def say(**fields):
    print(json.dumps(fields), flush=True)


class Recorder:
    """The client's side: records every update it is sent."""

    def __init__(self, answers):
        self.updates = []
        self.answers = answers

    async def session_update(self, session_id, update, **kwargs):
        kind = getattr(update, "session_update", None)
        entry = {"session": session_id, "kind": kind}
        content = getattr(update, "content", None)
        if kind in ("agent_message_chunk", "user_message_chunk", "agent_thought_chunk") and content is not None:
            entry["text"] = getattr(content, "text", None)
        if kind in ("tool_call", "tool_call_update"):
            entry["id"] = update.tool_call_id
            entry["status"] = getattr(update, "status", None)
            entry["title"] = getattr(update, "title", None)
            entry["tool_kind"] = getattr(update, "kind", None)
            said = [getattr(getattr(c, "content", None), "text", None) for c in (getattr(update, "content", None) or [])]
            entry["text"] = "".join(t for t in said if t) or None
        self.updates.append(entry)
        say(event="update", **entry)

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        choice = self.answers.pop(0) if self.answers else "cancelled"
        say(
            event="permission",
            session=session_id,
            id=tool_call.tool_call_id,
            title=tool_call.title,
            options=[o.option_id for o in options],
            choice=choice,
        )
        if choice == "error":
            raise acp.RequestError(-32603, "this client cannot ask its user")
        if choice == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))

    def on_connect(self, conn):
        pass


def compactions(event):
    """A `compaction_update` the agent sent, as it came."""
    update = event.message.get("params", {}).get("update", {})
    if event.message.get("method") == "session/update" and update.get("sessionUpdate") == "compaction_update":
        summary = "".join(b.get("text", "") for b in update.get("summary") or [])
        say(event="compaction", id=update["compactionId"], status=update["status"], summary=summary)


def subagents(event):
    """A `subagent_update` the agent sent, and the sessions a call's update names, as they came."""
    params = event.message.get("params", {})
    update = params.get("update", {})
    if event.message.get("method") != "session/update":
        return
    if update.get("sessionUpdate") == "subagent_update":
        say(event="subagent", on=params.get("sessionId"), session=update["sessionId"], title=update.get("title"), state=update.get("state"))
    if update.get("sessionUpdate") == "tool_call_update":
        named = [c["sessionId"] for c in update.get("content") or [] if c.get("type") == "session"]
        if named:
            say(event="call_names", on=params.get("sessionId"), id=update["toolCallId"], sessions=named)


async def run(plan):
    session = plan.get("session")
    steps = plan["steps"]
    answers = list(plan.get("answers", []))
    while steps:
        recorder = Recorder(answers)
        # (Time to stop what still works once stdin closes, before it is terminated.)
        # (Its stderr is ours, which the test shows when it fails.)
        shutdown = {"shutdown_timeout": 20.0, "stderr": None}
        spawned = acp.spawn_agent_process(
            recorder, *plan["command"], env=plan["env"], cwd=plan["cwd"], transport_kwargs=shutdown
        )
        async with spawned as (conn, proc):
            if plan.get("compaction") or plan.get("subagents"):
                # The package's schema has no `session.compaction` or `subagents` capability
                # yet (nor their updates): they are sent, and the updates seen, as the wire has them.
                capabilities = {}
                if plan.get("compaction"):
                    conn._conn.add_observer(compactions)
                    capabilities["session"] = {"compaction": {}}
                if plan.get("subagents"):
                    conn._conn.add_observer(subagents)
                    capabilities["subagents"] = {}
                init = await conn._conn.send_request(
                    "initialize", {"protocolVersion": acp.PROTOCOL_VERSION, "clientCapabilities": capabilities}
                )
                say(event="initialized", load=init["agentCapabilities"]["loadSession"])
            else:
                init = await conn.initialize(
                    protocol_version=acp.PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
                )
                auth = [m.id for m in init.auth_methods or []]
                say(event="initialized", load=init.agent_capabilities.load_session, auth=auth)
            while steps:
                step = steps.pop(0)
                verb = step[0]
                if verb == "restart":
                    break
                try:
                    if verb == "new":
                        made = await conn.new_session(cwd=plan["cwd"], mcp_servers=servers_of(plan))
                        session = made.session_id
                        say(event="session", session=session, options=options_of(made), mode=mode_of(made))
                    elif verb == "prompt":
                        done = await conn.prompt(session_id=session, prompt=[text_block(step[1])])
                        say(event="stopped", reason=done.stop_reason)
                    elif verb == "cancel_after":
                        turn = asyncio.ensure_future(conn.prompt(session_id=session, prompt=[text_block(step[1])]))
                        await asyncio.sleep(step[2])
                        await conn.cancel(session_id=session)
                        done = await turn
                        say(event="stopped", reason=done.stop_reason)
                    elif verb == "load":
                        await conn.load_session(session_id=session, cwd=plan["cwd"], mcp_servers=[])
                        say(event="loaded", session=session)
                    elif verb == "resume":
                        await conn.resume_session(session_id=session, cwd=plan["cwd"], mcp_servers=[])
                        say(event="resumed", session=session)
                    elif verb == "fork":
                        forked = await conn.fork_session(session_id=session, cwd=plan["cwd"], mcp_servers=[])
                        say(event="forked", session=forked.session_id, origin=session, mode=mode_of(forked))
                        session = forked.session_id
                    elif verb == "close":
                        await conn.close_session(session_id=session)
                        say(event="closed", session=session)
                    elif verb == "prompt_twice":
                        first = asyncio.ensure_future(conn.prompt(session_id=session, prompt=[text_block(step[1])]))
                        await asyncio.sleep(step[3])
                        try:
                            await conn.prompt(session_id=session, prompt=[text_block(step[2])])
                            say(event="stopped", reason="unexpected")
                        except acp.RequestError as e:
                            say(event="error", verb=verb, code=e.code, message=str(e))
                        done = await first
                        say(event="stopped", reason=done.stop_reason)
                    elif verb == "set_mode":
                        await conn.set_session_mode(session_id=session, mode_id=step[1])
                        say(event="mode_set", mode=step[1])
                    elif verb == "set_option":
                        changed = await conn.set_config_option(config_id=step[1], session_id=session, value=step[2])
                        say(event="option_set", options=options_of(changed))
                    elif verb == "prompt_watching":
                        # Whether `path` holds `needle` before the turn ends (as an editor
                        # watching the file would see it).
                        turn = asyncio.ensure_future(conn.prompt(session_id=session, prompt=[text_block(step[1])]))
                        seen_before_end = False
                        while not turn.done():
                            try:
                                with open(step[2], encoding="utf-8") as f:
                                    seen_before_end = seen_before_end or step[3] in f.read()
                            except OSError:
                                pass
                            await asyncio.sleep(0.05)
                        done = await turn
                        say(event="watched", seen_before_end=seen_before_end)
                        say(event="stopped", reason=done.stop_reason)
                    elif verb == "kill_during":
                        turn = asyncio.ensure_future(conn.prompt(session_id=session, prompt=[text_block(step[1])]))
                        await asyncio.sleep(step[2])
                        proc.kill()
                        await proc.wait()
                        turn.cancel()
                        say(event="killed", session=session)
                        steps.clear()
                        break
                    elif verb == "quit_during":
                        turn = asyncio.ensure_future(conn.prompt(session_id=session, prompt=[text_block(step[1])]))
                        await asyncio.sleep(step[2])
                        turn.cancel()
                        steps.clear()
                        break
                    elif verb == "authenticate":
                        await conn.authenticate(method_id=step[1])
                        say(event="authenticated", method=step[1])
                    elif verb == "list":
                        listed = await conn.list_sessions(cwd=plan["cwd"])
                        say(event="listed", sessions=[s.session_id for s in listed.sessions])
                    elif verb == "bad_prompt":
                        await conn.prompt(session_id=step[1], prompt=[text_block(step[2])])
                        say(event="stopped", reason="unexpected")
                except acp.RequestError as e:
                    say(event="error", verb=verb, code=e.code, message=str(e))


asyncio.run(run(json.load(sys.stdin)))
