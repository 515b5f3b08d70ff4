"""An agent framework end to end: the OpenAI Agents SDK (Responses API) runs a tool-calling agent
through the gateway."""

from __future__ import annotations

import agents
import pytest

from tests.conftest import one_model_config, sdk


@pytest.fixture(autouse=True)
def no_tracing_export():
    agents.set_tracing_disabled(True)  # the SDK would otherwise send traces to OpenAI
    yield


async def test_a_tool_calling_agent_runs_through_the_responses_surface(scripted, start_gateway):
    gateway = await start_gateway(one_model_config(scripted.url))
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return "sunny"

    agent = agents.Agent(name="forecaster", instructions="Answer with the weather.", tools=[get_weather],
                         model=agents.OpenAIResponsesModel(model="m1", openai_client=sdk(gateway)))
    result = await agents.Runner.run(agent, "Weather in Paris?", max_turns=4)
    assert asked == ["Paris"]
    assert result.final_output == "It is sunny."
    first, second = scripted.requests[-2:]
    assert first["messages"][0] == {"role": "system", "content": "Answer with the weather."}
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
