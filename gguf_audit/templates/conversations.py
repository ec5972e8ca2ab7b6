"""The standard conversations every chat template is rendered on, from the fullest to the simplest.

Pure data. The render child receives them in its request; the semantic checks
read their assistant messages to find where a rendered turn ends.
"""

from __future__ import annotations

__all__ = ["standard_conversations"]


def standard_conversations(bos_token: str = "", eos_token: str = "") -> list[tuple[str, dict[str, object]]]:
    """The render contexts, from the full conversation to the simplest, in the order tried.

    Many real templates reject a system or tool role (``raise_exception``), so
    a template only fails the audit when even ``single_turn`` does not render.
    """
    system = {"role": "system", "content": "You are a helpful assistant."}
    user1 = {"role": "user", "content": "Hello! Who are you?"}
    assistant1 = {"role": "assistant", "content": "I am an assistant. How can I help?"}
    user2 = {"role": "user", "content": "What is the weather in Paris?"}
    # A 9-character alphanumeric id: Mistral's templates raise on any other shape.
    call_id = "call0abc1"
    tool_call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    }
    tool_result = {
        "role": "tool",
        "tool_call_id": call_id,
        "name": "get_weather",
        "content": '{"temperature": 18, "unit": "celsius"}',
    }
    final = {"role": "assistant", "content": "It is 18 degrees Celsius in Paris."}
    assistant2 = {"role": "assistant", "content": "Let me check: it is sunny in Paris."}
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the current weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "The city's name."}},
                    "required": ["city"],
                },
            },
        }
    ]
    base: dict[str, object] = {"bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": False}
    return [
        (
            "full",
            {**base, "tools": tools, "messages": [system, user1, assistant1, user2, tool_call, tool_result, final]},
        ),
        ("no_tools", {**base, "messages": [system, user1, assistant1, user2, assistant2]}),
        ("no_system", {**base, "messages": [user1, assistant1, user2, assistant2]}),
        ("single_turn", {**base, "messages": [user1, assistant1]}),
    ]
