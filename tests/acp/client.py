"""A real ACP client (the `agent-client-protocol` package from PyPI) driving
`offshoot acp`. Reads a plan as JSON on stdin: the command to start the agent, its
environment, the session's cwd and the steps to take; prints one JSON line per thing
it observed, for the Rust test to assert on.

Steps: ["new"], ["prompt", text], ["cancel_after", text, seconds], ["load"], ["list"],
["bad_prompt", session_id, text]. A fresh process (a new connection) starts at every
["restart"]. The plan's "answers" are what the user chooses at each permission request,
in turn: an option id, "cancelled", or "error" (a client that cannot answer).
"""

import asyncio
import json
import sys

import acp
from acp import text_block
from acp.schema import AllowedOutcome, ClientCapabilities, DeniedOutcome, RequestPermissionResponse


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
        if kind in ("agent_message_chunk", "user_message_chunk") and content is not None:
            entry["text"] = getattr(content, "text", None)
        if kind in ("tool_call", "tool_call_update"):
            entry["id"] = update.tool_call_id
            entry["status"] = getattr(update, "status", None)
            entry["title"] = getattr(update, "title", None)
            entry["tool_kind"] = getattr(update, "kind", None)
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


async def run(plan):
    session = plan.get("session")
    steps = plan["steps"]
    answers = list(plan.get("answers", []))
    while steps:
        recorder = Recorder(answers)
        async with acp.spawn_agent_process(recorder, *plan["command"], env=plan["env"], cwd=plan["cwd"]) as (conn, _proc):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
            say(event="initialized", load=init.agent_capabilities.load_session)
            while steps:
                step = steps.pop(0)
                verb = step[0]
                if verb == "restart":
                    break
                try:
                    if verb == "new":
                        made = await conn.new_session(cwd=plan["cwd"], mcp_servers=[])
                        session = made.session_id
                        say(event="session", session=session)
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
                    elif verb == "list":
                        listed = await conn.list_sessions(cwd=plan["cwd"])
                        say(event="listed", sessions=[s.session_id for s in listed.sessions])
                    elif verb == "bad_prompt":
                        await conn.prompt(session_id=step[1], prompt=[text_block(step[2])])
                        say(event="stopped", reason="unexpected")
                except acp.RequestError as e:
                    say(event="error", verb=verb, code=e.code, message=str(e))


asyncio.run(run(json.load(sys.stdin)))
