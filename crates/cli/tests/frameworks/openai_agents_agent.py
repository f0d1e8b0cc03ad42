"""The OpenAI Agents SDK's MCP servers (MCPServerStdio, MCPServerStreamableHttp) against dsh
serve, with strict tool schemas and structured content, under a scripted Model (no LLM)."""
import asyncio
import json

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (ResponseFunctionToolCall, ResponseOutputMessage,
                                    ResponseOutputText)

from dsh_target import HOOK_CONTEXT, TOOLS, check, http, stdio_command

NULLS = {"offset": None, "limit": None}
SCRIPT = [
    [("read_file", {"path": "a.txt", **NULLS}),
     ("grep", {"pattern": "one", "path": None, "glob": None, "type": None, "output_mode": None,
               "case_insensitive": None, "context": None, "before": None, "after": None,
               "multiline": None, "head_limit": None})],
    [("edit_file", {"path": "a.txt", "old_string": "one", "new_string": "uno",
                    "replace_all": None, "edits": None}),
     ("shell", {"command": "echo from-shell", "timeout_ms": None, "workdir": None,
                "description": None})],
    [("read_file", {"path": "../outside.txt", **NULLS})],
]


class Scripted(Model):
    def __init__(self):
        self.seen = []
        self.tools = []

    async def get_response(self, system_instructions, input, model_settings, tools, *args, **kw):
        self.tools = tools
        outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        self.seen.append({o["call_id"]: str(o["output"]) for o in outputs})
        turn = len(self.seen) - 1
        if turn < len(SCRIPT):
            output = [ResponseFunctionToolCall(type="function_call", id=f"fc_{turn}_{i}",
                                               call_id=f"call_{turn}_{i}", name=name,
                                               arguments=json.dumps(args), status="completed")
                      for i, (name, args) in enumerate(SCRIPT[turn])]
        else:
            output = [ResponseOutputMessage(type="message", id="msg", role="assistant",
                                            status="completed", content=[ResponseOutputText(
                                                type="output_text", text="done",
                                                annotations=[])])]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def server():
    # A call may run longer than the SDK's default 5 s, which sends no cancellation.
    options = {"use_structured_content": True, "client_session_timeout_seconds": 60}
    if target := http():
        return MCPServerStreamableHttp({"url": target[0], "headers": {
            "Authorization": f"Bearer {target[1]}"}}, **options)
    command, args = stdio_command()
    return MCPServerStdio({"command": command, "args": args}, **options)


async def main():
    set_tracing_disabled(True)
    model = Scripted()
    async with server() as dsh:
        agent = Agent(name="editor", model=model, mcp_servers=[dsh],
                      mcp_config={"convert_schemas_to_strict": True})
        result = await Runner.run(agent, "edit a.txt")
    check(result.final_output == "done", f"the run ends: {result.final_output}")
    names = {t.name for t in model.tools}
    check(TOOLS <= names, f"every tool converts: {sorted(names)}")
    strict = [t.name for t in model.tools if getattr(t, "strict_json_schema", False)]
    check(TOOLS <= set(strict), f"strict schemas: {strict}")
    seen = {k: v for turn in model.seen for k, v in turn.items()}
    check(HOOK_CONTEXT in seen["call_0_0"], f"the hook context reaches the model: {seen['call_0_0']}")
    check("a.txt" in seen["call_0_1"], f"grep with null optionals: {seen['call_0_1']}")
    check('"replacements": 1' in seen["call_1_0"], seen["call_1_0"])
    check("from-shell" in seen["call_1_1"], seen["call_1_1"])
    check("DENIED" in seen["call_2_0"], f"the model sees the denial: {seen['call_2_0']}")
    print("OK")


asyncio.run(main())
