"""Framework adapters: the engine inside LangChain, the OpenAI Agents SDK and pydantic-ai.

Each adapter is a module of its own on an optional extra, imported explicitly so that nothing
here imports a framework:

| module | extra | what |
|---|---|---|
| `adapters.langchain` | `langchain` | `CompactionMiddleware`, a LangChain v1 agent middleware |
| `adapters.openai_agents` | `openai-agents` | `CompactionSession`, a record-backed `Session` |
| `adapters.pydantic_ai` | `pydantic-ai` | `CompactionHistory`, a history capability |

Each converts the framework's messages to ours and back (text, images, tool calls and tool
results) and raises `ConversionError` for what ours cannot carry.
"""

__all__: list[str] = []
