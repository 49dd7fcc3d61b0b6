"""Workspace-wide test settings.

Hypothesis runs derandomized by default: the same examples on every machine, so the fuzz tests (one per
public API, issue 22) decide a commit the same way locally and in CI. To search new examples, run
``uv run pytest --hypothesis-profile=explore`` (random draws, more examples) and fix what it finds.
"""

from hypothesis import settings

settings.register_profile("default", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=200)
settings.load_profile("default")
