"""LangChain's langchain-mcp-adapters against dsh serve: a persistent session (`client.session`
+ `load_mcp_tools`) under `create_agent` with a scripted fake chat model (no LLM); over stdio,
also the default `client.get_tools()`, which opens a new session (a new dsh process) per call."""
import asyncio

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

from dsh_target import HOOK_CONTEXT, TOOLS, check, http, stdio_command


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


def call(name, args, n):
    return {"name": name, "args": args, "id": f"call_{n}", "type": "tool_call"}


SCRIPT = [
    AIMessage("", tool_calls=[call("read_file", {"path": "a.txt", "offset": None, "limit": None}, 1),
                              call("grep", {"pattern": "one", "path": "", "type": "",
                                            "head_limit": 0}, 2)]),
    AIMessage("", tool_calls=[call("edit_file", {"path": "a.txt", "old_string": "one",
                                                 "new_string": "uno"}, 3),
                              call("shell", {"command": "echo from-shell"}, 4)]),
    AIMessage("", tool_calls=[call("read_file", {"path": "../outside.txt"}, 5)]),
    AIMessage("done"),
]


def connection():
    if target := http():
        return {"transport": "streamable_http", "url": target[0],
                "headers": {"Authorization": f"Bearer {target[1]}"}}
    command, args = stdio_command()
    return {"transport": "stdio", "command": command, "args": args}


async def main():
    client = MultiServerMCPClient({"dsh": connection()})
    async with client.session("dsh") as session:
        tools = await load_mcp_tools(session)
        check(TOOLS <= {t.name for t in tools}, f"every tool converts: {[t.name for t in tools]}")
        agent = create_agent(ScriptedModel(messages=iter(SCRIPT)), tools)
        state = await agent.ainvoke({"messages": [("user", "edit a.txt")]})
    seen = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    said = {k: str(m.content) for k, m in seen.items()}
    check(HOOK_CONTEXT in said["call_1"], f"the hook context reaches the model: {said['call_1']}")
    check("a.txt" in said["call_2"], f"grep with empty optionals: {said['call_2']}")
    check("Edited" in said["call_3"], said["call_3"])
    check("from-shell" in said["call_4"], said["call_4"])
    check("DENIED" in said["call_5"], f"the model sees the denial: {said['call_5']}")
    if not http():
        # The default: every call a new MCP session, so a new dsh on the same log.
        by_name = {t.name: t for t in await client.get_tools()}
        await by_name["read_file"].ainvoke({"path": "b.txt"})
        edited = await by_name["edit_file"].ainvoke(
            {"path": "b.txt", "old_string": "two", "new_string": "dos"})
        check("Edited" in str(edited), f"a new session remembers the read: {edited}")
    print("OK")


asyncio.run(main())
