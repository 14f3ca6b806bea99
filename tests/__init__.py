"""gguf-schema test-suite."""
