"""Vertex AI request mapping: an OpenAI chat/completions body → google-genai contents,
tools and config pieces.

Which OpenAI parameters are honoured, and how each maps to Gemini, is listed in
``gateway.adapters.vertex``'s docstring; this module holds the tables and the translation of
messages, tools and ``response_format``. A parameter Gemini cannot honour is a 400 here, before
any upstream call.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.genai import types as genai_types

from gateway.adapters.base import Call, refuse
from gateway.errors import GatewayError

#: Maximum output tokens per model (Google's model cards): the reservation's bound
#: when a request gives no ``max_tokens`` (Vertex then allows up to this).
MAX_OUTPUT_TOKENS = {
    "gemini-2.5-flash": 65_536,
    "gemini-2.5-pro": 65_536,
    "gemini-2.5-flash-lite": 65_536,
    "gemini-2.0-flash": 8_192,
    "gemini-3-flash-preview": 65_536,
    "gemini-3.1-pro-preview": 65_536,
}
DEFAULT_MAX_OUTPUT_TOKENS = 65_536
MAX_STOP_SEQUENCES = 5

_COMMON = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "user",
    }
)
CHAT_PARAMETERS = _COMMON | {
    "messages",
    "max_completion_tokens",
    "response_format",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
}
COMPLETION_PARAMETERS = _COMMON | {"prompt"}


def message_text(content: Any, where: str) -> str:
    """A message's text (a string or text parts); any other part type is a 400 naming it."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for j, part in enumerate(content):
        if part.get("type") != "text":
            raise refuse(f"{where}.content[{j}].type={part.get('type')}", "Vertex")
        parts.append(part["text"])
    return "".join(parts)


def request_contents(call: Call) -> tuple[list[genai_types.Content], str | None]:
    """The conversation as Gemini contents, and the system/developer messages joined.

    Tool results name their function by the earlier tool call's id, so an unknown id is a 400.
    """
    from google.genai import types

    body = call.body
    if call.kind == "completion":
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            if len(prompt) != 1 or not isinstance(prompt[0], str):
                raise refuse("prompt", "Vertex", "only one text prompt per request")
            prompt = prompt[0]
        return [types.Content(role="user", parts=[types.Part(text=prompt)])], None
    system: list[str] = []
    contents: list[genai_types.Content] = []
    names: dict[str, str] = {}
    for i, message in enumerate(body["messages"]):
        role = message.get("role")
        where = f"messages[{i}]"
        if role in ("system", "developer"):
            system.append(message_text(message.get("content"), where))
        elif role == "user":
            text = message_text(message.get("content"), where)
            contents.append(types.Content(role="user", parts=[types.Part(text=text)]))
        elif role == "assistant":
            parts = []
            text = message_text(message.get("content"), where)
            if text:
                parts.append(types.Part(text=text))
            for call_ in message.get("tool_calls") or []:
                function = call_.get("function") or {}
                names[str(call_.get("id"))] = str(function.get("name", ""))
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    raise GatewayError(
                        400,
                        "invalid_request",
                        f"{where}.tool_calls: arguments must be a JSON object.",
                        param="messages",
                    ) from None
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(name=function.get("name"), args=args)
                    )
                )
            contents.append(types.Content(role="model", parts=parts or [types.Part(text="")]))
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), "")
            if not name:
                raise GatewayError(
                    400,
                    "invalid_request",
                    f"{where}: tool_call_id names no earlier tool call.",
                    param="messages",
                )
            result = message_text(message.get("content"), where)
            contents.append(
                types.Content(
                    role="user",
                    parts=[
                        types.Part(
                            function_response=types.FunctionResponse(
                                name=name, response={"content": result}
                            )
                        )
                    ],
                )
            )
        else:
            raise GatewayError(
                400, "invalid_request", f"Unsupported message role {role!r}.", param="messages"
            )
    return contents, ("\n".join(system) if system else None)


def request_tools(
    body: dict[str, Any],
) -> tuple[genai_types.ToolListUnion | None, genai_types.ToolConfig | None]:
    """Function tools and ``tool_choice`` as Gemini tools and a function-calling config."""
    from google.genai import types

    tools = body.get("tools")
    if not tools:
        return None, None
    if not isinstance(tools, list):
        raise GatewayError(400, "invalid_request", "'tools' must be a list.", param="tools")
    declarations = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise refuse(f"tools[{i}].type", "Vertex", "only function tools map to Gemini")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise GatewayError(
                400, "invalid_request", f"tools[{i}].function.name is required.", param="tools"
            )
        declarations.append(
            types.FunctionDeclaration(
                name=function["name"],
                description=function.get("description"),
                parameters_json_schema=function.get("parameters"),
            )
        )
    choice = body.get("tool_choice", "auto")
    modes = types.FunctionCallingConfigMode
    mode, allowed = modes.AUTO, None
    if choice == "none":
        mode = modes.NONE
    elif choice == "required":
        mode = modes.ANY
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if choice.get("type") != "function" or not isinstance(name, str):
            raise refuse("tool_choice", "Vertex")
        mode, allowed = modes.ANY, [name]
    elif choice != "auto":
        raise refuse("tool_choice", "Vertex")
    config = types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=mode, allowed_function_names=allowed
        )
    )
    return [types.Tool(function_declarations=declarations)], config


def response_format_config(body: dict[str, Any]) -> dict[str, Any]:
    """``GenerateContentConfig`` keywords for ``response_format`` (none for plain text)."""
    fmt = body.get("response_format")
    if fmt is None:
        return {}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"response_mime_type": "application/json"}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise GatewayError(
                400,
                "invalid_request",
                "response_format.json_schema.schema must be an object.",
                param="response_format",
            )
        return {"response_mime_type": "application/json", "response_json_schema": schema}
    raise refuse("response_format", "Vertex", f"type {kind!r}")
