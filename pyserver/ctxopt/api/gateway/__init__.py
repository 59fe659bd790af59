"""The model-API gateway: Anthropic, OpenAI and Gemini requests pruned on their way up."""
