#!/usr/bin/env python3
"""Checks the gateway with the official OpenAI Python SDK, as its users call it.

What an OpenAI-compatible gateway promises is what this client accepts: the answers
parse into the SDK's types (strict response validation is on, so a missing or mistyped
field fails), streams end with a usage chunk, and the gateway's refusals surface as the
SDK's typed exceptions with OpenAI's `code` and `param`.

    openai_sdk_checks.py --base-url http://127.0.0.1:8080/v1 --model m
    openai_sdk_checks.py --base-url ... --model smollm2 --tools calls
    openai_sdk_checks.py --base-url ... --model m --api-key <JWT> --identity-required

One line per check; the first failure exits 1 with what was expected and what came.
If the SDK is not installed, exits 2 naming `make openai-sdk`. Only the standard
library and `openai` (pinned by the Makefile) are used.
"""

import argparse
import json
import sys

try:
    import openai
except ImportError:
    print("the openai package is not installed in this Python; run `make openai-sdk`", file=sys.stderr)
    sys.exit(2)

TOOL = "get_weather"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL,
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city"}},
            "required": ["city"],
        },
    },
}


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def client_for(args, api_key):
    # No retries: a check sees the gateway's first answer. Strict validation: the SDK
    # refuses an answer that does not match its types, instead of filling in None.
    return openai.OpenAI(
        base_url=args.base_url,
        api_key=api_key,
        timeout=args.timeout,
        max_retries=0,
        _strict_response_validation=True,
    )


def user(text):
    return [{"role": "user", "content": text}]


def check_chat(client, model):
    answer = client.chat.completions.create(
        model=model, messages=user("What is the capital of France? Answer in one word."), max_tokens=8
    )
    expect(isinstance(answer, openai.types.chat.ChatCompletion), f"not a ChatCompletion: {answer!r}")
    expect(answer.choices, f"no choices: {answer!r}")
    message = answer.choices[0].message
    expect(message.role == "assistant", f"role {message.role!r}")
    expect(message.content and message.content.strip(), f"no content: {answer!r}")
    usage = answer.usage
    expect(usage is not None and usage.completion_tokens > 0, f"no usage: {answer!r}")
    return f"{usage.prompt_tokens}+{usage.completion_tokens} tokens, {message.content.strip()[:40]!r}"


def check_stream(client, model):
    stream = client.chat.completions.create(
        model=model,
        messages=user("Count to five."),
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    expect(chunks, "the stream ended without a chunk")
    for chunk in chunks:
        expect(isinstance(chunk, openai.types.chat.ChatCompletionChunk), f"not a ChatCompletionChunk: {chunk!r}")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    expect(text.strip(), f"no content in {len(chunks)} chunks")
    last = chunks[-1]
    expect(last.usage is not None and last.usage.completion_tokens > 0, f"the last chunk has no usage: {last!r}")
    expect(not last.choices, f"the usage chunk has choices: {last!r}")
    expect(all(c.usage is None for c in chunks[:-1]), "usage before the last chunk")
    return f"{len(chunks)} chunks, the last with usage {last.usage.prompt_tokens}+{last.usage.completion_tokens}"


def check_completion(client, model):
    answer = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    expect(isinstance(answer, openai.types.Completion), f"not a Completion: {answer!r}")
    expect(answer.choices and answer.choices[0].text.strip(), f"no text: {answer!r}")
    expect(answer.usage is not None and answer.usage.completion_tokens > 0, f"no usage: {answer!r}")
    return f"{answer.usage.completion_tokens} tokens, {answer.choices[0].text.strip()[:40]!r}"


def check_tools(client, model, mode):
    answer = client.chat.completions.create(
        model=model,
        messages=user("What is the weather in Paris? Use the get_weather tool."),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": TOOL}},
        temperature=0,
        max_tokens=48,
    )
    expect(answer.choices, f"no choices: {answer!r}")
    message = answer.choices[0].message
    if mode == "text":
        # A server without tool calling (model-sim) answers the request in text.
        expect(not message.tool_calls, f"tool calls from a text-only server: {message!r}")
        expect(message.content and message.content.strip(), f"no content: {answer!r}")
        return f"answered in text ({len(message.content)} chars)"
    expect(message.tool_calls and len(message.tool_calls) == 1, f"not one tool call: {message!r}")
    call = message.tool_calls[0]
    expect(call.type == "function" and call.id, f"a malformed call: {call!r}")
    expect(call.function.name == TOOL, f"called {call.function.name!r}, not {TOOL!r}")
    try:
        arguments = json.loads(call.function.arguments)
    except ValueError as e:
        raise CheckFailed(f"the arguments are not JSON ({e}): {call.function.arguments!r}") from e
    expect(isinstance(arguments, dict) and isinstance(arguments.get("city"), str), f"arguments {arguments!r}")
    return f"{TOOL}({json.dumps(arguments)})"


def expect_error(kind, call, code, param=None):
    """Runs `call`, which must raise `kind` with this `code` (and `param`)."""
    try:
        answer = call()
    except kind as e:
        expect(e.code == code, f"{kind.__name__} with code {e.code!r}, not {code!r}: {e.body!r}")
        if param is not None:
            expect(e.param == param, f"{kind.__name__} with param {e.param!r}, not {param!r}: {e.body!r}")
        return f"{kind.__name__} {e.status_code}, code {e.code}" + (f", param {e.param}" if param else "")
    except openai.APIError as e:
        raise CheckFailed(f"{type(e).__name__}, not {kind.__name__}: {e}") from e
    raise CheckFailed(f"no error, but {answer!r}")


def check_wrong_type(client, model):
    # Passed raw, as a client with a bug would: the SDK sends it as it is.
    return expect_error(
        openai.BadRequestError,
        lambda: client.chat.completions.create(model=model, messages=user("hi"), max_tokens="ten"),
        "invalid_type",
        "max_tokens",
    )


def check_unknown_model(client, _model):
    return expect_error(
        openai.NotFoundError,
        lambda: client.chat.completions.create(model="no-such-model", messages=user("hi"), max_tokens=1),
        "model_not_found",
    )


def check_models(client, model):
    ids = [m.id for m in client.models.list()]
    expect(model in ids, f"{model!r} not among {ids}")
    return f"{len(ids)} models: {', '.join(ids)}"


def check_no_key(args, model):
    # No Authorization header at all: the SDK's way to send a request without a key.
    client = client_for(args, "unused")
    return expect_error(
        openai.AuthenticationError,
        lambda: client.chat.completions.create(
            model=model, messages=user("hi"), max_tokens=1, extra_headers={"Authorization": openai.omit}
        ),
        "invalid_api_key",
    )


def check_wrong_key(args, model):
    client = client_for(args, "sk-not-a-token-the-gateway-trusts")
    return expect_error(
        openai.AuthenticationError,
        lambda: client.chat.completions.create(model=model, messages=user("hi"), max_tokens=1),
        "invalid_api_key",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the gateway's OpenAI base URL, ending in /v1")
    parser.add_argument("--model", required=True, help="a model the gateway serves")
    parser.add_argument("--api-key", default="sk-infergate-checks", help="the key the SDK sends as its bearer")
    parser.add_argument(
        "--tools",
        choices=["text", "calls"],
        default="text",
        help="what a request naming a function gets: `calls` (vLLM) or an answer in `text` (model-sim)",
    )
    parser.add_argument(
        "--identity-required",
        action="store_true",
        help="the gateway refuses requests without a verified key: check the 401s too",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    args = parser.parse_args()

    client = client_for(args, args.api_key)
    checks = [
        ("chat", lambda: check_chat(client, args.model)),
        ("stream with usage", lambda: check_stream(client, args.model)),
        ("completion", lambda: check_completion(client, args.model)),
        (f"tools ({args.tools})", lambda: check_tools(client, args.model, args.tools)),
        ("wrong-typed max_tokens", lambda: check_wrong_type(client, args.model)),
        ("unknown model", lambda: check_unknown_model(client, args.model)),
        ("models.list", lambda: check_models(client, args.model)),
    ]
    if args.identity_required:
        checks += [
            ("no key", lambda: check_no_key(args, args.model)),
            ("wrong key", lambda: check_wrong_key(args, args.model)),
        ]
    print(f"openai {openai.__version__} against {args.base_url}, model {args.model}")
    for name, check in checks:
        try:
            detail = check()
        except CheckFailed as e:
            print(f"FAIL {name}: {e}")
            return 1
        except openai.OpenAIError as e:
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            return 1
        print(f"ok   {name}: {detail}")
    print(f"all {len(checks)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
