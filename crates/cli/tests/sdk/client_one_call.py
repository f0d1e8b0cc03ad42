"""One ordinary client of dsh serve --http, driven by the official Python MCP SDK (streamable
HTTP, the 2025-11-25 handshake).

argv: URL TOKEN TOOL ARGUMENTS_JSON. Initializes, lists the tools (every output schema free of
formats JSON Schema does not define), makes one call, ends the session (DELETE) and prints
`RESULT <is_error> <text>` on one line. Exits non-zero when anything fails.
"""

import json
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, TOKEN, TOOL, ARGUMENTS = sys.argv[1:5]
KNOWN_FORMATS = {
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
    "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
    "json-pointer", "relative-json-pointer", "regex",
}


def formats(schema):
    if isinstance(schema, dict):
        found = [schema["format"]] if isinstance(schema.get("format"), str) else []
        return found + [f for v in schema.values() for f in formats(v)]
    if isinstance(schema, list):
        return [f for v in schema for f in formats(v)]
    return []


async def main():
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with create_mcp_http_client(headers=headers) as client, streamable_http_client(
        URL, http_client=client
    ) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for tool in (await s.list_tools()).tools:
                unknown = [f for f in formats(tool.output_schema) if f not in KNOWN_FORMATS]
                assert not unknown, (tool.name, unknown)
            result = await s.call_tool(TOOL, json.loads(ARGUMENTS))
            text = " ".join(c.text for c in result.content if getattr(c, "type", "") == "text")
            print("RESULT", bool(result.is_error), text.replace("\n", " "), flush=True)


anyio.run(main)
