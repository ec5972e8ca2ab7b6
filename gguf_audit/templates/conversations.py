"""The standard conversations every chat template is rendered on, from the fullest to the simplest.

Pure data. The render child receives them in its request; the semantic checks
read their assistant messages to find where a rendered turn ends.
"""

from __future__ import annotations

__all__ = ["PROBE_TEXTS", "probe_conversations", "standard_conversations"]


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


#: Message texts a runtime passes through unchanged and a hostile template may
#: read names or code from: template syntax, dunder names, escape steps.
PROBE_TEXTS: tuple[str, ...] = (
    "{{ 7 * 7 }} {% raw %}{{ config }}{% endraw %} {# note #}",
    "__class__,__init__,__globals__,__builtins__,_TemplateReference__context",
    "__class__ __mro__ __subclasses__ __globals__ os popen mro gi_frame",
    "__class__",
    "__init__",
    "__globals__",
)


def probe_conversations(bos_token: str = "", eos_token: str = "") -> list[tuple[str, dict[str, object]]]:
    """The further contexts every template is rendered on after a standard one: what runtimes send.

    A payload may wait for the generation prompt, a conversation ending with the
    user's turn, a long conversation, tool calls, documents, or message texts
    holding names. These are all rendered (errors ignored: many templates
    reject some of them); the sandbox and the limits judge what they reach.
    """
    full = dict(standard_conversations(bos_token, eos_token))["full"]
    tools = full["tools"]
    messages = full["messages"]
    assert isinstance(messages, list)
    system, user1, assistant1, user2, tool_call, tool_result, final = messages
    probe_users = [{"role": "user", "content": text} for text in PROBE_TEXTS]
    special = {"role": "user", "content": f"{bos_token} hi {eos_token} {PROBE_TEXTS[1]}"}
    long_turns: list[object] = [system]
    for i in range(6):
        long_turns += [probe_users[i % len(probe_users)], {"role": "assistant", "content": f"Answer {i}."}]
    long_turns.append(special)
    string_args = {
        **tool_call,
        "tool_calls": [
            {
                "id": "call0abc1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    documents = [
        {"title": "__class__", "text": PROBE_TEXTS[2]},
        {"title": "Paris", "text": PROBE_TEXTS[0]},
    ]
    base: dict[str, object] = {"bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": True}
    return [
        ("prompt_user_last", {**base, "messages": [system, user1, assistant1, user2]}),
        ("prompt_no_system", {**base, "messages": [user1]}),
        (
            "prompt_tools",
            {**base, "tools": tools, "messages": [system, user1, assistant1, user2, tool_call, tool_result]},
        ),
        ("prompt_string_args", {**base, "tools": tools, "messages": [user2, string_args, tool_result, final, user1]}),
        ("long", {**base, "messages": long_turns}),
        ("long_no_prompt", {**base, "add_generation_prompt": False, "messages": [*long_turns, final]}),
        (
            "documents",
            {
                **base,
                "tools": tools,
                "documents": documents,
                "messages": [system, *probe_users[:3]],
                "enable_thinking": True,
                "continue_final_message": False,
            },
        ),
        ("names_no_system", {**base, "messages": [*probe_users[3:], special]}),
    ]
