"""Framework adapters: the engine inside LangChain, the OpenAI Agents SDK and pydantic-ai.

Each adapter is a module of its own on an optional extra, imported explicitly so that nothing
here imports a framework:

| module | extra | what |
|---|---|---|
| `adapters.langchain` | `langchain` | `CompactionMiddleware`, a LangChain v1 agent middleware |
| `adapters.openai_agents` | `openai-agents` | `CompactionSession`, a record-backed `Session` |
| `adapters.pydantic_ai` | `pydantic-ai` | `CompactionHistory`, a history capability, and |
| | | `CompactionProcessor`, a history processor |

Each records every message the framework produces, in order (the final reply of a run too),
takes `summarizer=` (default: the agent's own model writes the summaries), converts the
framework's messages to ours and back (text, images, tool calls and tool results) and raises
`ConversionError` for what ours cannot carry. Each has `FakeSummaries`, a wrapper that makes
the framework's fake models answer summary requests in tests.
"""

__all__: list[str] = []
