"""pydantic-ai's MCPToolset against dsh serve, with a scripted FunctionModel (no LLM)."""
import asyncio
import json

from fastmcp import Client
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dsh_target import HOOK_CONTEXT, TOOLS, check, fastmcp_transport

SCRIPT = [
    [ToolCallPart("read_file", {"path": "a.txt", "offset": None, "limit": None}),
     ToolCallPart("grep", {"pattern": "one", "path": None, "glob": None, "type": None,
                           "output_mode": None, "head_limit": None})],
    [ToolCallPart("edit_file", {"path": "a.txt", "old_string": "one", "new_string": "uno"}),
     ToolCallPart("shell", {"command": "echo from-shell"})],
    [ToolCallPart("read_file", {"path": "../outside.txt"})],
]
seen = []


def model(messages, info: AgentInfo) -> ModelResponse:
    seen.append(str(messages[-1]))
    if len(seen) == 1:
        names = {t.name for t in info.function_tools}
        check(TOOLS <= names, f"the agent offers every tool: {sorted(names)}")
    turn = len(seen) - 1
    return ModelResponse(parts=SCRIPT[turn] if turn < len(SCRIPT) else [TextPart("done")])


async def main():
    # 'failed' lets the model see a denial instead of a retry that ends the run.
    toolset = MCPToolset(Client(fastmcp_transport()), tool_error_behavior="failed")
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    result = await agent.run("edit a.txt")
    check(result.output == "done", f"the run ends: {result.output}")
    check(HOOK_CONTEXT in seen[1], f"the hook context reaches the model: {seen[1]}")
    check("a.txt" in seen[1], f"grep with null optionals: {seen[1]}")
    check("from-shell" in seen[2], f"the shell ran: {seen[2]}")
    check("DENIED" in seen[3], f"the model sees the denial: {seen[3]}")
    print("OK")


asyncio.run(main())
