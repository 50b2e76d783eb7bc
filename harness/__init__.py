"""The project's experiment harness, apart from the library: experiment drivers, run summaries and the model-card
builder. Run its tools from the repository root as modules, e.g. ``python -m harness.experiments --help``."""
