"""Agent libraries against the server, unchanged but for the base URL (issue
12, Tests): LangChain's `with_structured_output` (default method) and
`bind_tools(tool_choice="any")`, pydantic-ai's `output_type` (tool output by
default, and `NativeOutput`), and a smolagents `ToolCallingAgent`, each over
Chat Completions and, where the library speaks it, the Responses API. These
once got invalid tool calls or 400s; now the server constrains replies and
calls to their schemas, and every structured result and tool argument is
validated here against its schema with `jsonschema`. The default model
(SmolLM2-135M) is small, so what is asserted is structure, not the quality of
an answer. An httpx2 hook (the openai SDK's HTTP client) records each request body, to show which path the
library took (e.g. that the default method is response_format json_schema)."""
import json
from typing import Literal

import httpx2
import jsonschema
import pydantic
import pytest
from langchain_core.tools import tool as lc_tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from smolagents import ActionStep, OpenAIServerModel, ToolCallingAgent
from smolagents import tool
from smolagents.utils import AgentMaxStepsError


class City(pydantic.BaseModel):
    """A city and the country it is in."""
    name: str
    country: str
    continent: Literal["Africa", "America", "Asia", "Europe", "Oceania"]
    population: int = pydantic.Field(ge=0, le=100_000_000)


def valid_city(out):
    assert isinstance(out, City), repr(out)
    jsonschema.validate(out.model_dump(mode="json"), City.model_json_schema())


def bodies_hook(bodies, is_async=False):
    def record(request):
        if request.method == "POST":
            bodies.append(json.loads(request.content))

    async def arecord(request):
        record(request)
    return {"request": [arecord if is_async else record]}


# --- LangChain (langchain-openai) ---

@lc_tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


@lc_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


LC_SCHEMAS = {t.name: convert_to_openai_tool(t)["function"]["parameters"] for t in (get_weather, add)}


def chat_openai(server, bodies, responses, **kw):
    return ChatOpenAI(model="smollm2", base_url=server.url + "/v1", api_key="none", max_retries=0,
                      temperature=0, max_tokens=200, use_responses_api=responses,
                      http_client=httpx2.Client(event_hooks=bodies_hook(bodies)), **kw)


@pytest.mark.parametrize("responses", [False, True], ids=["chat", "responses"])
def test_langchain_with_structured_output(real, responses):
    bodies = []
    out = chat_openai(real, bodies, responses).with_structured_output(City).invoke(
        "Describe Paris: its name, country, continent and population.")
    valid_city(out)
    fmt = bodies[-1]["text"]["format"] if responses else bodies[-1]["response_format"]
    assert fmt["type"] == "json_schema"  # the default method: constrained by the server, not a tool call


@pytest.mark.parametrize("responses,stream", [(False, False), (False, True), (True, False), (True, True)],
                         ids=["chat", "chat-stream", "responses", "responses-stream"])
def test_langchain_bind_tools_any(real, responses, stream):
    bodies = []
    llm = chat_openai(real, bodies, responses, streaming=stream).bind_tools([get_weather, add], tool_choice="any")
    msg = llm.invoke("What's the weather in Paris?")
    assert bodies[-1]["tool_choice"] == "required"
    assert msg.invalid_tool_calls == []
    assert msg.tool_calls, msg
    for call in msg.tool_calls:
        assert call["name"] in LC_SCHEMAS
        jsonschema.validate(call["args"], LC_SCHEMAS[call["name"]])
        assert call["id"].startswith("call_")


# --- pydantic-ai ---

@pytest.mark.parametrize("model_cls", [OpenAIChatModel, OpenAIResponsesModel], ids=["chat", "responses"])
@pytest.mark.parametrize("native", [False, True], ids=["tool-output", "native-output"])
def test_pydantic_ai_output_type(real, model_cls, native):
    bodies = []
    provider = OpenAIProvider(base_url=real.url + "/v1", api_key="none",
                              http_client=httpx2.AsyncClient(event_hooks=bodies_hook(bodies, is_async=True)))
    agent = Agent(model_cls("smollm2", provider=provider), output_type=NativeOutput(City) if native else City,
                  model_settings={"temperature": 0, "max_tokens": 200})
    result = agent.run_sync("Describe Paris: its name, country, continent and population.")
    valid_city(result.output)
    body = bodies[-1]
    if native:  # response_format json_schema (Chat) or text.format (Responses)
        fmt = body["text"]["format"] if model_cls is OpenAIResponsesModel else body["response_format"]
        assert fmt["type"] == "json_schema"
    else:  # the default: an output tool the model must call
        assert body["tool_choice"] == "required" and body["tools"]


# --- smolagents ---

executed = []


@tool
def weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: The name of the city.
    """
    executed.append(city)
    return f"sunny, 24 C in {city}"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_smolagents_tool_calling_agent(real, stream):
    executed.clear()
    model = OpenAIServerModel(model_id="smollm2", api_base=real.url + "/v1", api_key="none",
                              temperature=0, max_tokens=150)
    agent = ToolCallingAgent(tools=[weather], model=model, max_steps=2, verbosity_level=0, stream_outputs=stream)
    answer = agent.run("Use the weather tool to get the weather in Paris, then give the final answer.")
    assert answer is not None
    schemas = {"weather": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"], "additionalProperties": False},
               "final_answer": {"type": "object", "required": ["answer"]}}
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    calls = [c for s in steps for c in (s.tool_calls or [])]
    assert calls, "the agent made no tool call"
    for c in calls:  # parsed by smolagents: a declared tool with arguments that fit it
        assert c.name in schemas
        jsonschema.validate(c.arguments, schemas[c.name])
    # no step failed on a malformed call or a bad argument; running out of steps is fine
    errors = [s.error for s in steps if s.error is not None and not isinstance(s.error, AgentMaxStepsError)]
    assert errors == []
    assert len(executed) == sum(c.name == "weather" for c in calls)
